// CPU LayerNorm / RMSNorm (float32, OpenMP over rows).
//
// Forward is one independent pass per row (two-pass mean / variance for stability). Backward
// writes grad_x per row and reduces the parameter gradients over rows with the deterministic
// chunked reduction of row_chunks.h (chunk sizes depend only on N; partials added in chunk
// order, in double) into grad_weight / grad_bias, so the result is bit-identical for any
// number of threads and any schedule.
#include <cmath>
#include <vector>

#include "cpu_clones.h"
#include "myriad/ops/norms.h"
#include "row_chunks.h"
#include "parallel_threshold.h"

namespace myriad::cpu {

namespace {

// One row of the backward passes, on plain pointers: called from a lambda that captured the
// tensors' pointers by reference, GCC kept the row sums scalar (a serial add chain: 2.7x slower
// on GPT-2's 2048 x 768 rows). dx may alias dy (each element is read before its own write).
// dx = r * (dnorm - mean(dnorm) - xhat * mean(dnorm * xhat)), dnorm = dy * w; the parameter
// gradients' partials get dy * xhat (weight) and dy (bias) where given.
MYRIAD_CPU_CLONES void layernorm_backward_row(const float* xr, const float* dyr, const float* w, float m, float r,
                                              float inv_c, std::int64_t channels, float* dxr, float* partial_w,
                                              float* partial_b) {
  if (dxr != nullptr) {
    float dnorm_sum = 0.0f, dnorm_xhat_sum = 0.0f;
#pragma omp simd reduction(+ : dnorm_sum, dnorm_xhat_sum)
    for (std::int64_t c = 0; c < channels; ++c) {
      const float dnorm = dyr[c] * w[c];
      dnorm_sum += dnorm;
      dnorm_xhat_sum += dnorm * (xr[c] - m) * r;
    }
    const float dnorm_mean = dnorm_sum * inv_c, dnorm_xhat_mean = dnorm_xhat_sum * inv_c;
#pragma omp simd
    for (std::int64_t c = 0; c < channels; ++c) {
      const float xhat = (xr[c] - m) * r;
      dxr[c] = (dyr[c] * w[c] - dnorm_mean - xhat * dnorm_xhat_mean) * r;
    }
  }
  if (partial_w != nullptr) {
#pragma omp simd
    for (std::int64_t c = 0; c < channels; ++c) {
      partial_w[c] += dyr[c] * (xr[c] - m) * r;
      partial_b[c] += dyr[c];
    }
  }
}

// dx = r * (dnorm - xhat * mean(dnorm * xhat)), xhat = x * r, dnorm = dy * w; the weight
// gradient's partial gets dy * xhat where given.
MYRIAD_CPU_CLONES void rmsnorm_backward_row(const float* xr, const float* dyr, const float* w, float r, float inv_c,
                                            std::int64_t channels, float* dxr, float* partial_w) {
  if (dxr != nullptr) {
    float dnorm_xhat_sum = 0.0f;
#pragma omp simd reduction(+ : dnorm_xhat_sum)
    for (std::int64_t c = 0; c < channels; ++c) dnorm_xhat_sum += dyr[c] * w[c] * xr[c] * r;
    const float dnorm_xhat_mean = dnorm_xhat_sum * inv_c;
#pragma omp simd
    for (std::int64_t c = 0; c < channels; ++c) dxr[c] = (dyr[c] * w[c] - xr[c] * r * dnorm_xhat_mean) * r;
  }
  if (partial_w != nullptr) {
#pragma omp simd
    for (std::int64_t c = 0; c < channels; ++c) partial_w[c] += dyr[c] * xr[c] * r;
  }
}

}  // namespace

MYRIAD_CPU_CLONES void layernorm_forward(const LayernormArgs& args, const Tensor& x, const Tensor& weight,
                                         const Tensor& bias, Tensor& out, Tensor& mean, Tensor& rstd) {
  const std::int64_t channels = x.size(-1), rows = x.numel() / channels;
  const float* xp = x.data<float>();
  const float* w = weight.data<float>();
  const float* b = bias.defined() ? bias.data<float>() : nullptr;
  float* yp = out.data<float>();
  float* mean_p = mean.defined() ? mean.data<float>() : nullptr;
  float* rstd_p = rstd.defined() ? rstd.data<float>() : nullptr;
  const float inv_c = 1.0f / static_cast<float>(channels);
#pragma omp parallel for schedule(static) if (rows * channels >= kParallelMinElements)
  for (std::int64_t n = 0; n < rows; ++n) {
    const float* xr = xp + n * channels;
    float* yr = yp + n * channels;
    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
    for (std::int64_t c = 0; c < channels; ++c) sum += xr[c];
    const float m = sum * inv_c;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (std::int64_t c = 0; c < channels; ++c) sq += (xr[c] - m) * (xr[c] - m);
    const float r = 1.0f / std::sqrt(sq * inv_c + args.eps);
    if (b != nullptr) {
      for (std::int64_t c = 0; c < channels; ++c) yr[c] = (xr[c] - m) * r * w[c] + b[c];
    } else {
      for (std::int64_t c = 0; c < channels; ++c) yr[c] = (xr[c] - m) * r * w[c];
    }
    if (mean_p != nullptr) mean_p[n] = m;
    if (rstd_p != nullptr) rstd_p[n] = r;
  }
}

MYRIAD_CPU_CLONES void layernorm_backward(const LayernormArgs&, const Tensor& x, const Tensor& weight,
                                          const Tensor& mean, const Tensor& rstd, const Tensor& grad_out,
                                          Tensor& grad_x, Tensor& grad_weight, Tensor& grad_bias) {
  const std::int64_t channels = x.size(-1), rows = x.numel() / channels;
  const float* xp = x.data<float>();
  const float* w = weight.data<float>();
  const float* mean_p = mean.data<float>();
  const float* rstd_p = rstd.data<float>();
  const float* dyp = grad_out.data<float>();
  float* dxp = grad_x.defined() ? grad_x.data<float>() : nullptr;
  const bool want_w = grad_weight.defined(), want_b = grad_bias.defined();
  const std::int64_t width = (want_w || want_b) ? 2 * channels : 0;  // [dweight | dbias] per chunk
  const float inv_c = 1.0f / static_cast<float>(channels);

  auto row = [=](std::int64_t n, float* partial) {
    layernorm_backward_row(xp + n * channels, dyp + n * channels, w, mean_p[n], rstd_p[n], inv_c, channels,
                           dxp != nullptr ? dxp + n * channels : nullptr, width > 0 ? partial : nullptr,
                           width > 0 ? partial + channels : nullptr);
  };
  std::vector<float> partials = for_rows_chunked(rows, width, rows * channels >= kParallelMinElements, row);
  if (want_w) add_chunk_sums(partials, width, 0, channels, grad_weight.data<float>());
  if (want_b) add_chunk_sums(partials, width, channels, channels, grad_bias.data<float>());
}

MYRIAD_CPU_CLONES void rmsnorm_forward(const RmsnormArgs& args, const Tensor& x, const Tensor& weight, Tensor& out,
                                       Tensor& rstd) {
  const std::int64_t channels = x.size(-1), rows = x.numel() / channels;
  const float* xp = x.data<float>();
  const float* w = weight.data<float>();
  float* yp = out.data<float>();
  float* rstd_p = rstd.defined() ? rstd.data<float>() : nullptr;
  const float inv_c = 1.0f / static_cast<float>(channels);
#pragma omp parallel for schedule(static) if (rows * channels >= kParallelMinElements)
  for (std::int64_t n = 0; n < rows; ++n) {
    const float* xr = xp + n * channels;
    float* yr = yp + n * channels;
    float sq = 0.0f;
#pragma omp simd reduction(+ : sq)
    for (std::int64_t c = 0; c < channels; ++c) sq += xr[c] * xr[c];
    const float r = 1.0f / std::sqrt(sq * inv_c + args.eps);
    for (std::int64_t c = 0; c < channels; ++c) yr[c] = xr[c] * r * w[c];
    if (rstd_p != nullptr) rstd_p[n] = r;
  }
}

MYRIAD_CPU_CLONES void rmsnorm_backward(const RmsnormArgs&, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                        const Tensor& grad_out, Tensor& grad_x, Tensor& grad_weight) {
  const std::int64_t channels = x.size(-1), rows = x.numel() / channels;
  const float* xp = x.data<float>();
  const float* w = weight.data<float>();
  const float* rstd_p = rstd.data<float>();
  const float* dyp = grad_out.data<float>();
  float* dxp = grad_x.defined() ? grad_x.data<float>() : nullptr;
  const std::int64_t width = grad_weight.defined() ? channels : 0;
  const float inv_c = 1.0f / static_cast<float>(channels);

  auto row = [=](std::int64_t n, float* partial) {
    rmsnorm_backward_row(xp + n * channels, dyp + n * channels, w, rstd_p[n], inv_c, channels,
                         dxp != nullptr ? dxp + n * channels : nullptr, width > 0 ? partial : nullptr);
  };
  std::vector<float> partials = for_rows_chunked(rows, width, rows * channels >= kParallelMinElements, row);
  if (width > 0) add_chunk_sums(partials, width, 0, channels, grad_weight.data<float>());
}

}  // namespace myriad::cpu
