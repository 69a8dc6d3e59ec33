// CPU token routing (ops/token_routing.h). Indices are validated in one serial pass before
// anything is written (range, and for combine that no row appears twice in slot), so a bad index
// leaves every output untouched. The work then runs in parallel over output rows (gather) or over
// tokens (combine): each thread owns whole rows of every output — combine_rows_backward's
// scatter too, since each row of grad_rows belongs to at most one (t, j) — and every sum runs in
// increasing j (or c), so results are bit-for-bit the same whatever the thread count.
#include <cstring>
#include <vector>

#include "myriad/ops/token_routing.h"

namespace myriad::cpu {

namespace {

constexpr std::int64_t kParallelMinWork = 1 << 15;  // floats moved before threads pay off

// Throws on the first source index outside [-1, n).
void check_source(const std::int32_t* source, std::int64_t rows, std::int64_t n) {
  for (std::int64_t r = 0; r < rows; ++r) {
    MYRIAD_CHECK(source[r] >= -1 && source[r] < n, "gather_rows: source index "
                                                       << source[r] << " at position " << r
                                                       << " is outside [-1, N) with N = " << n);
  }
}

// Throws on the first slot entry (row-major) outside [-1, rows) or naming a row already named.
void check_slot(const char* op, const std::int32_t* slot, std::int64_t tokens, std::int64_t k, std::int64_t rows) {
  std::vector<std::int64_t> owner(static_cast<std::size_t>(rows), -1);  // flat slot position naming each row
  for (std::int64_t i = 0; i < tokens * k; ++i) {
    const std::int32_t s = slot[i];
    MYRIAD_CHECK(s >= -1 && s < rows, op << ": row index " << s << " at slot position [" << i / k << ", " << i % k
                                         << "] is outside [-1, R) with R = " << rows);
    if (s < 0) continue;
    const std::int64_t first = owner[static_cast<std::size_t>(s)];
    MYRIAD_CHECK(first < 0, op << ": row index " << s << " appears twice in slot, at [" << first / k << ", "
                               << first % k << "] and [" << i / k << ", " << i % k
                               << "] (a row belongs to one token and one choice)");
    owner[static_cast<std::size_t>(s)] = i;
  }
}

}  // namespace

void gather_rows(const Tensor& x, const Tensor& source_in, Tensor& out) {
  const std::int32_t* source = source_in.data<std::int32_t>();
  const std::int64_t rows = out.size(0), n = x.size(0), channels = x.size(1);
  check_source(source, rows, n);
  const float* src = x.data<float>();
  float* dst = out.data<float>();
  const auto row_bytes = static_cast<std::size_t>(channels) * sizeof(float);
#pragma omp parallel for schedule(static) if (rows * channels >= kParallelMinWork)
  for (std::int64_t r = 0; r < rows; ++r) {
    if (source[r] < 0) {
      std::memset(dst + r * channels, 0, row_bytes);
    } else {
      std::memcpy(dst + r * channels, src + static_cast<std::int64_t>(source[r]) * channels, row_bytes);
    }
  }
}

void combine_rows_forward(const Tensor& rows_in, const Tensor& slot_in, const Tensor& weight_in, Tensor& out) {
  const std::int32_t* slot = slot_in.data<std::int32_t>();
  const std::int64_t tokens = slot_in.size(0), k = slot_in.size(1), rows = rows_in.size(0), channels = rows_in.size(1);
  check_slot("combine_rows_forward", slot, tokens, k, rows);
  const float* src = rows_in.data<float>();
  const float* weight = weight_in.defined() ? weight_in.data<float>() : nullptr;
  float* dst = out.data<float>();
#pragma omp parallel for schedule(static) if (tokens * k * channels >= kParallelMinWork)
  for (std::int64_t t = 0; t < tokens; ++t) {
    float* o = dst + t * channels;
    std::memset(o, 0, static_cast<std::size_t>(channels) * sizeof(float));
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int32_t s = slot[t * k + j];
      if (s < 0) continue;
      const float* row = src + static_cast<std::int64_t>(s) * channels;
      if (weight == nullptr) {
        for (std::int64_t c = 0; c < channels; ++c) o[c] += row[c];
      } else {
        const float w = weight[t * k + j];
        for (std::int64_t c = 0; c < channels; ++c) o[c] += w * row[c];
      }
    }
  }
}

void combine_rows_backward(const Tensor& rows_in, const Tensor& slot_in, const Tensor& weight_in,
                           const Tensor& grad_out_in, Tensor& grad_rows, Tensor& grad_weight_out) {
  const std::int32_t* slot = slot_in.data<std::int32_t>();
  const std::int64_t tokens = slot_in.size(0), k = slot_in.size(1);
  const std::int64_t rows = grad_rows.size(0), channels = grad_rows.size(1);
  check_slot("combine_rows_backward", slot, tokens, k, rows);
  const float* weight = weight_in.defined() ? weight_in.data<float>() : nullptr;
  const float* grad_out = grad_out_in.data<float>();
  const float* row_values = grad_weight_out.defined() ? rows_in.data<float>() : nullptr;
  float* grad_weight = grad_weight_out.defined() ? grad_weight_out.data<float>() : nullptr;
  float* dst = grad_rows.data<float>();
  const bool parallel = (rows + tokens * k) * channels >= kParallelMinWork;
  // Rows no slot names get zeros; the others are overwritten below.
  const auto row_bytes = static_cast<std::size_t>(channels) * sizeof(float);
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t r = 0; r < rows; ++r) std::memset(dst + r * channels, 0, row_bytes);
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t t = 0; t < tokens; ++t) {
    const float* g = grad_out + t * channels;
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int32_t s = slot[t * k + j];
      if (s < 0) {
        if (grad_weight != nullptr) grad_weight[t * k + j] = 0.0f;
        continue;
      }
      float* gr = dst + static_cast<std::int64_t>(s) * channels;
      const float w = weight == nullptr ? 1.0f : weight[t * k + j];
      for (std::int64_t c = 0; c < channels; ++c) gr[c] = w * g[c];
      if (grad_weight != nullptr) {
        const float* row = row_values + static_cast<std::int64_t>(s) * channels;
        double sum = 0.0;  // in increasing c
        for (std::int64_t c = 0; c < channels; ++c) sum += static_cast<double>(g[c]) * row[c];
        grad_weight[t * k + j] = static_cast<float>(sum);
      }
    }
  }
}

}  // namespace myriad::cpu
