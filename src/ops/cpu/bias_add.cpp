// CPU bias add (float32, OpenMP over rows).
//
// The bias gradient (column sums of grad_out) is reduced deterministically: rows are cut into
// chunks whose size depends only on N (never on the thread count); each chunk sums its rows in
// row order into its own slice of a partial buffer, and the partials are added chunk by chunk
// in index order (in double) into grad_bias. Bit-identical for any number of threads.
#include <algorithm>
#include <cstring>
#include <vector>

#include "myriad/ops/bias_add.h"

namespace myriad::cpu {

namespace {

constexpr std::int64_t kMaxChunks = 64;                 // bounds the partial buffer to 64 * C floats
constexpr std::int64_t kMinRowsPerChunk = 8;            // keeps chunks worth a thread's time
constexpr std::int64_t kParallelMinElements = 1 << 15;  // below this, threads cost more than they save

}  // namespace

void bias_add_forward(const BiasAddArgs&, const Tensor& x, const Tensor& bias, Tensor& out) {
  const std::int64_t channels = x.size(-1), rows = x.numel() / channels;
  const float* xp = x.data<float>();
  const float* b = bias.data<float>();
  float* yp = out.data<float>();
#pragma omp parallel for schedule(static) if (rows * channels >= kParallelMinElements)
  for (std::int64_t n = 0; n < rows; ++n) {
    const float* xr = xp + n * channels;
    float* yr = yp + n * channels;
#pragma omp simd
    for (std::int64_t c = 0; c < channels; ++c) yr[c] = xr[c] + b[c];
  }
}

void bias_add_backward(const BiasAddArgs&, const Tensor& grad_out, Tensor& grad_x, Tensor& grad_bias) {
  const std::int64_t channels = grad_out.size(-1), rows = grad_out.numel() / channels;
  const float* dyp = grad_out.data<float>();
  const bool parallel = rows * channels >= kParallelMinElements;
  if (grad_x.defined() && grad_x.data<float>() != dyp) {
    float* dxp = grad_x.data<float>();
#pragma omp parallel for schedule(static) if (parallel)
    for (std::int64_t n = 0; n < rows; ++n) {
      std::memcpy(dxp + n * channels, dyp + n * channels, static_cast<std::size_t>(channels) * sizeof(float));
    }
  }
  if (!grad_bias.defined() || rows == 0) return;

  const std::int64_t per_chunk = std::max(kMinRowsPerChunk, (rows + kMaxChunks - 1) / kMaxChunks);
  const std::int64_t chunks = (rows + per_chunk - 1) / per_chunk;
  std::vector<float> partials(static_cast<std::size_t>(chunks * channels), 0.0f);
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t k = 0; k < chunks; ++k) {
    float* partial = partials.data() + k * channels;
    const std::int64_t end = std::min(rows, (k + 1) * per_chunk);
    for (std::int64_t n = k * per_chunk; n < end; ++n) {
      const float* dyr = dyp + n * channels;
#pragma omp simd
      for (std::int64_t c = 0; c < channels; ++c) partial[c] += dyr[c];
    }
  }
  float* db = grad_bias.data<float>();
  for (std::int64_t c = 0; c < channels; ++c) {
    double sum = 0.0;
    for (std::int64_t k = 0; k < chunks; ++k) sum += partials[k * channels + c];
    db[c] += static_cast<float>(sum);
  }
}

}  // namespace myriad::cpu
