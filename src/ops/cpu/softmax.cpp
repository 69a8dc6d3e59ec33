// CPU softmax over the last dim (float32, OpenMP over rows, static schedule; each row is
// independent, so results never depend on the thread count). Forward: row max, then
// exp(x - max) and its sum, then scale by 1 / sum. The exponentials go through fast_exp (within
// ~2e-7 relative of exp, the attention kernels' exp; fast_exp.h), so every pass vectorises; the
// row's sum is kept in the vector's lanes and added once. Every row reads all of its inputs before
// the first write that could clobber them, so out == x and grad_x == grad_out are safe.
#include <algorithm>
#include <limits>

#include "cpu_clones.h"
#include "fast_exp.h"
#include "myriad/ops/softmax.h"
#include "parallel_threshold.h"

namespace myriad::cpu {

MYRIAD_CPU_CLONES void softmax_forward(const SoftmaxArgs&, const Tensor& x, Tensor& out) {
  const std::int64_t length = x.size(-1), rows = x.numel() / length;
  const float* xp = x.data<float>();
  float* yp = out.data<float>();
#pragma omp parallel for schedule(static) if (rows * length >= kParallelMinElements)
  for (std::int64_t n = 0; n < rows; ++n) {
    const float* xr = xp + n * length;
    float* yr = yp + n * length;
    float max_value = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : max_value)
    for (std::int64_t l = 0; l < length; ++l) max_value = std::max(max_value, xr[l]);
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t l = 0; l < length; ++l) {
      yr[l] = fast_exp(xr[l] - max_value);
      sum += yr[l];
    }
    const float inv_sum = 1.0f / sum;
#pragma omp simd
    for (std::int64_t l = 0; l < length; ++l) yr[l] *= inv_sum;
  }
}

MYRIAD_CPU_CLONES void softmax_backward(const SoftmaxArgs&, const Tensor& out, const Tensor& grad_out, Tensor& grad_x) {
  const std::int64_t length = out.size(-1), rows = out.numel() / length;
  const float* yp = out.data<float>();
  const float* dyp = grad_out.data<float>();
  float* dxp = grad_x.data<float>();
#pragma omp parallel for schedule(static) if (rows * length >= kParallelMinElements)
  for (std::int64_t n = 0; n < rows; ++n) {
    const float* yr = yp + n * length;
    const float* dyr = dyp + n * length;
    float* dxr = dxp + n * length;
    float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
    for (std::int64_t l = 0; l < length; ++l) dot += dyr[l] * yr[l];
#pragma omp simd
    for (std::int64_t l = 0; l < length; ++l) dxr[l] = yr[l] * (dyr[l] - dot);
  }
}

}  // namespace myriad::cpu
