// CPU embedding. Ids are validated in one serial pass before anything is written (so a bad id
// leaves out / grad_table untouched). Forward copies rows in parallel over tokens. Backward
// parallelises over fixed-width column chunks of C: each thread owns whole columns of
// grad_table and scans every id in order, so each table element is summed in token order
// whatever the thread count — no atomics, bit-for-bit deterministic.
#include <algorithm>
#include <cstring>
#include <string>

#include "myriad/ops/embedding.h"
#include "parallel_threshold.h"

namespace myriad::cpu {

namespace {

constexpr std::int64_t kColumnChunk = 64;  // floats per backward work item (4 cache lines)

// Row-major multi-index of flat element `flat` in `shape`, as "[i, j, ...]".
std::string position_string(const Shape& shape, std::int64_t flat) {
  Shape index(shape.size());
  for (int d = static_cast<int>(shape.size()) - 1; d >= 0; --d) {
    index[d] = shape[d] > 0 ? flat % shape[d] : 0;
    flat = shape[d] > 0 ? flat / shape[d] : 0;
  }
  return shape_string(index);
}

// Throws on the first id (row-major order) outside [0, rows) — or, for a vocabulary shard, at or
// above rows (negative ids name another shard's rows).
void check_ids(const char* op, const Tensor& ids, const std::int32_t* id, std::int64_t rows, bool shard) {
  const std::int64_t n = ids.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    MYRIAD_CHECK((id[i] >= 0 || shard) && id[i] < rows,
                 op << ": id " << id[i] << " at position " << position_string(ids.shape(), i) << " (flat index " << i
                    << ") of ids " << ids.describe() << " is outside [0, V) with V = " << rows);
  }
}

}  // namespace

void embedding_forward(const EmbeddingArgs& args, const Tensor& ids_in, const Tensor& table_in, Tensor& out) {
  const Tensor ids = ids_in.contiguous(), table = table_in.contiguous();
  const std::int32_t* id = ids.data<std::int32_t>();
  const std::int64_t n = ids.numel(), rows = table.size(0), channels = table.size(1);
  check_ids("embedding_forward", ids, id, rows, args.vocab_shard);
  const float* src = table.data<float>();
  float* dst = out.data<float>();
#pragma omp parallel for schedule(static) if (n * channels >= kParallelMinElements)
  for (std::int64_t i = 0; i < n; ++i) {
    if (id[i] < 0) {  // another shard's row
      std::memset(dst + i * channels, 0, static_cast<std::size_t>(channels) * sizeof(float));
    } else {
      std::memcpy(dst + i * channels, src + static_cast<std::int64_t>(id[i]) * channels,
                  static_cast<std::size_t>(channels) * sizeof(float));
    }
  }
}

void embedding_backward(const EmbeddingArgs& args, const Tensor& ids_in, const Tensor& grad_out_in,
                        Tensor& grad_table) {
  const Tensor ids = ids_in.contiguous(), grad_out = grad_out_in.contiguous();
  const std::int32_t* id = ids.data<std::int32_t>();
  const std::int64_t n = ids.numel(), rows = grad_table.size(0), channels = grad_table.size(1);
  check_ids("embedding_backward", ids, id, rows, args.vocab_shard);
  const float* src = grad_out.data<float>();
  float* dst = grad_table.data<float>();
  const std::int64_t chunks = (channels + kColumnChunk - 1) / kColumnChunk;
#pragma omp parallel for schedule(static) if (chunks > 1 && n * channels >= kParallelMinElements)
  for (std::int64_t chunk = 0; chunk < chunks; ++chunk) {
    const std::int64_t c0 = chunk * kColumnChunk, width = std::min(kColumnChunk, channels - c0);
    for (std::int64_t i = 0; i < n; ++i) {
      if (id[i] < 0) continue;  // another shard's row
      float* d = dst + static_cast<std::int64_t>(id[i]) * channels + c0;
      const float* s = src + i * channels + c0;
      for (std::int64_t c = 0; c < width; ++c) d[c] += s[c];
    }
  }
}

}  // namespace myriad::cpu
