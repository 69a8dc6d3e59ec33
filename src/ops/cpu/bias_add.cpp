// CPU bias add (float32, OpenMP over rows).
//
// The bias gradient (column sums of grad_out) is reduced with the deterministic chunked
// reduction of row_chunks.h (chunk sizes depend only on N; partials added in chunk order, in
// double) into grad_bias. Bit-identical for any number of threads.
#include <cstring>
#include <vector>

#include "cpu_clones.h"
#include "myriad/ops/bias_add.h"
#include "row_chunks.h"
#include "parallel_threshold.h"

namespace myriad::cpu {

namespace {

// partial += one row of the gradient: the bias gradient's row sum, a function of its own (not the
// lambda's body) so that a portable build's run-time dispatch covers it (cpu_clones.h).
MYRIAD_CPU_CLONES void add_row_into(const float* dyr, std::int64_t channels, float* partial) {
#pragma omp simd
  for (std::int64_t c = 0; c < channels; ++c) partial[c] += dyr[c];
}

}  // namespace

MYRIAD_CPU_CLONES void bias_add_forward(const BiasAddArgs&, const Tensor& x, const Tensor& bias, Tensor& out) {
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

MYRIAD_CPU_CLONES void bias_add_backward(const BiasAddArgs&, const Tensor& grad_out, Tensor& grad_x,
                                         Tensor& grad_bias) {
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

  auto row = [&](std::int64_t n, float* partial) { add_row_into(dyp + n * channels, channels, partial); };
  const std::vector<float> partials = for_rows_chunked(rows, channels, parallel, row);
  add_chunk_sums(partials, channels, 0, channels, grad_bias.data<float>());
}

}  // namespace myriad::cpu
