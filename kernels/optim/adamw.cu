// Fused AdamW over fp32 master weights, and the deterministic squared gradient norm.
//
// adamw: one elementwise pass, the same per-element math as the CPU op (ops/cpu/adamw.cpp) with
// the bias corrections folded into two per-step scalars computed on the host in float64:
//   g = grad * grad_scale;  p -= lr * weight_decay * p;  m = b1 m + (1 - b1) g;
//   v = b2 v + (1 - b2) g^2;  p -= (lr / (1 - b1^t)) * m / (sqrt(v) / sqrt(1 - b2^t) + eps)
// Grid-stride loop; IEEE sqrt and division (nvcc's defaults), so results differ from the CPU's
// only by fused multiply-adds (a few ulps). Compute copies (16-bit training) are written by the
// same pass: the updated value rounded to nearest even (__float2bfloat16_rn / __float2half_rn, as
// the CPU op's conversions) into the 16-bit copy, and that number widened into the f32 copy.
// grad_norm_squared: blocks of kNormBlock elements are each summed in float64 (threads stride
// the block, then a shared-memory tree in a fixed order) into scratch; one more block adds the
// partials in the same fixed tree. The order depends on n only: bit-identical run to run.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <type_traits>
#include <utility>

#include "common/block_reduce.cuh"
#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kNormBlock = 16384;
constexpr std::int64_t kMaxAdamBlocks = 65536;

struct AdamWScalars {
  float step_size, inv_sqrt_bias2, lr_wd, b1, b2, one_minus_b1, one_minus_b2, eps, scale;
};

__device__ inline __nv_bfloat16 to_narrow(float x, __nv_bfloat16*) { return __float2bfloat16_rn(x); }
__device__ inline __half to_narrow(float x, __half*) { return __float2half_rn(x); }
__device__ inline float widen(__nv_bfloat16 h) { return __bfloat162float(h); }
__device__ inline float widen(__half h) { return __half2float(h); }

// H: the copies' 16-bit type (void: no copies). rounded / narrow may each be null.
template <typename H>
__global__ void adamw_kernel(float* param, const float* grad, float* m, float* v, std::int64_t n, AdamWScalars s,
                             float* rounded, H* narrow) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = grad[i] * s.scale;
    const float p = param[i];
    const float decayed = p - s.lr_wd * p;
    const float mi = s.b1 * m[i] + s.one_minus_b1 * g;
    const float vi = s.b2 * v[i] + s.one_minus_b2 * (g * g);
    m[i] = mi;
    v[i] = vi;
    const float updated = decayed - s.step_size * mi / (sqrtf(vi) * s.inv_sqrt_bias2 + s.eps);
    param[i] = updated;
    if constexpr (!std::is_void_v<H>) {
      const H h = to_narrow(updated, narrow);
      if (narrow != nullptr) narrow[i] = h;
      if (rounded != nullptr) rounded[i] = widen(h);
    }
  }
}

__global__ void norm_partials(const float* grad, std::int64_t n, double* partials) {
  __shared__ double shared[kThreads];
  const std::int64_t begin = static_cast<std::int64_t>(blockIdx.x) * kNormBlock;
  const std::int64_t end = begin + kNormBlock < n ? begin + kNormBlock : n;
  double sum = 0.0;
  for (std::int64_t i = begin + threadIdx.x; i < end; i += kThreads) {
    const double g = grad[i];
    sum += g * g;
  }
  const double total = detail::block_reduce<kThreads>(sum, shared, detail::Add{});
  if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

__global__ void norm_total(const double* partials, std::int64_t count, double* out) {
  __shared__ double shared[kThreads];
  double sum = 0.0;
  for (std::int64_t i = threadIdx.x; i < count; i += kThreads) sum += partials[i];
  const double total = detail::block_reduce<kThreads>(sum, shared, detail::Add{});
  if (threadIdx.x == 0) *out = total;
}

}  // namespace

void adamw_update_f32(float* param, const float* grad, float* m, float* v, std::int64_t n, const AdamWStep& step,
                      cudaStream_t stream, const AdamWCopyPointers& copies) {
  const char* op = "adamw_update_f32";
  detail::check_count(op, "n", n);
  MYRIAD_CHECK(step.step >= 1, op << ": step must be >= 1 (1-based, for the bias correction), got " << step.step);
  MYRIAD_CHECK(
      step.beta1 >= 0 && step.beta1 < 1 && step.beta2 >= 0 && step.beta2 < 1 && step.eps > 0 && step.weight_decay >= 0,
      op << ": need 0 <= beta1, beta2 < 1, eps > 0, weight_decay >= 0; got beta1 " << step.beta1 << ", beta2 "
         << step.beta2 << ", eps " << step.eps << ", weight_decay " << step.weight_decay);
  if (n == 0) return;
  for (auto [name, ptr] : {std::pair<const char*, const void*>{"param", param}, {"grad", grad}, {"m", m}, {"v", v}}) {
    detail::check_pointer(op, name, ptr, alignof(float));
  }
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
  detail::check_disjoint(op, "param", param, bytes, "grad", grad, bytes);
  detail::check_disjoint(op, "param", param, bytes, "m", m, bytes);
  detail::check_disjoint(op, "param", param, bytes, "v", v, bytes);
  detail::check_disjoint(op, "m", m, bytes, "v", v, bytes);
  if (copies.rounded != nullptr) {
    detail::check_pointer(op, "copies.rounded", copies.rounded, alignof(float));
    detail::check_disjoint(op, "copies.rounded", copies.rounded, bytes, "param", param, bytes);
  }
  if (copies.narrow != nullptr) {
    detail::check_pointer(op, "copies.narrow", copies.narrow, 2);
    detail::check_disjoint(op, "copies.narrow", copies.narrow, bytes / 2, "param", param, bytes);
  }
  const double t = static_cast<double>(step.step);
  const double bias1 = 1.0 - std::pow(static_cast<double>(step.beta1), t);
  const double bias2 = 1.0 - std::pow(static_cast<double>(step.beta2), t);
  AdamWScalars s;
  s.step_size = static_cast<float>(static_cast<double>(step.lr) / bias1);
  s.inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2));
  s.lr_wd = static_cast<float>(static_cast<double>(step.lr) * static_cast<double>(step.weight_decay));
  s.b1 = step.beta1;
  s.b2 = step.beta2;
  s.one_minus_b1 = 1.0f - step.beta1;
  s.one_minus_b2 = 1.0f - step.beta2;
  s.eps = step.eps;
  s.scale = step.grad_scale;
  const std::int64_t blocks = std::min<std::int64_t>(detail::grid_blocks(op, n, kThreads), kMaxAdamBlocks);
  const auto grid = static_cast<unsigned>(blocks);
  if (copies.rounded == nullptr && copies.narrow == nullptr) {
    adamw_kernel<void><<<grid, kThreads, 0, stream>>>(param, grad, m, v, n, s, nullptr, nullptr);
  } else if (copies.f16) {
    adamw_kernel<__half>
        <<<grid, kThreads, 0, stream>>>(param, grad, m, v, n, s, copies.rounded, static_cast<__half*>(copies.narrow));
  } else {
    adamw_kernel<__nv_bfloat16><<<grid, kThreads, 0, stream>>>(param, grad, m, v, n, s, copies.rounded,
                                                               static_cast<__nv_bfloat16*>(copies.narrow));
  }
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

std::int64_t grad_norm_scratch_doubles(std::int64_t n) { return detail::ceil_div(n, kNormBlock); }

void grad_norm_squared_f32(const float* grad, std::int64_t n, double* scratch, std::int64_t scratch_doubles,
                           double* out, cudaStream_t stream) {
  const char* op = "grad_norm_squared_f32";
  detail::check_count(op, "n", n);
  detail::check_pointer(op, "out", out, alignof(double));
  const std::int64_t blocks = grad_norm_scratch_doubles(n);
  if (n == 0) {
    MYRIAD_CUDA_CHECK(cudaMemsetAsync(out, 0, sizeof(double), stream));
    return;
  }
  detail::check_pointer(op, "grad", grad, alignof(float));
  detail::check_pointer(op, "scratch", scratch, alignof(double));
  MYRIAD_CHECK(scratch_doubles >= blocks,
               op << ": scratch holds " << scratch_doubles << " doubles, " << n << " elements need " << blocks);
  norm_partials<<<detail::grid_blocks(op, n, kNormBlock), kThreads, 0, stream>>>(grad, n, scratch);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
  norm_total<<<1, kThreads, 0, stream>>>(scratch, blocks, out);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace myriad::cuda
