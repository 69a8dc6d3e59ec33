// 1-bit Adam's local momentum and its update with the frozen second moment
// (ops/onebit_adam_update.h, kernels.h): elementwise grid-stride passes, each operation rounded as the CPU op rounds it
// (the _rn intrinsics keep nvcc from fusing multiply-adds), so param and m are the CPU's bits.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void onebit_adam_update_kernel(float* param, float* m, const float* v, std::int64_t n, OneBitAdamStep s) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float momentum = __fmul_rn(m[i], s.inverse_replicas);
    m[i] = momentum;
    const float p = param[i];
    const float decayed = __fsub_rn(p, __fmul_rn(s.decay, p));
    const float denominator = __fadd_rn(__fsqrt_rn(__fdiv_rn(v[i], s.bias2)), s.eps);
    param[i] = __fsub_rn(decayed, __fdiv_rn(__fmul_rn(s.lr, __fdiv_rn(momentum, s.bias1)), denominator));
  }
}

__global__ void onebit_adam_momentum_kernel(float* m, const float* grad, std::int64_t n, float beta1, float gain) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    m[i] = __fadd_rn(__fmul_rn(beta1, m[i]), __fmul_rn(gain, grad[i]));
  }
}

}  // namespace

void onebit_adam_momentum_f32(float* m, const float* grad, std::int64_t n, float beta1, float gain,
                              cudaStream_t stream) {
  const char* op = "onebit_adam_momentum_f32";
  detail::check_count(op, "n", n);
  if (n == 0) return;
  detail::check_pointer(op, "m", m, alignof(float));
  detail::check_pointer(op, "grad", grad, alignof(float));
  const auto bytes = static_cast<std::size_t>(n) * sizeof(float);
  detail::check_disjoint(op, "m", m, bytes, "grad", grad, bytes);
  onebit_adam_momentum_kernel<<<detail::grid_stride_blocks(op, n, kThreads), kThreads, 0, stream>>>(m, grad, n, beta1,
                                                                                                    gain);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

void onebit_adam_update_f32(float* param, float* m, const float* v, std::int64_t n, const OneBitAdamStep& step,
                            cudaStream_t stream) {
  const char* op = "onebit_adam_update_f32";
  detail::check_count(op, "n", n);
  MYRIAD_CHECK(step.bias1 > 0.0f && step.bias2 > 0.0f && step.eps > 0.0f,
               op << ": need bias1, bias2, eps > 0; got " << step.bias1 << ", " << step.bias2 << ", " << step.eps);
  if (n == 0) return;
  detail::check_pointer(op, "param", param, alignof(float));
  detail::check_pointer(op, "m", m, alignof(float));
  detail::check_pointer(op, "v", v, alignof(float));
  const auto bytes = static_cast<std::size_t>(n) * sizeof(float);
  detail::check_disjoint(op, "param", param, bytes, "m", m, bytes);
  detail::check_disjoint(op, "param", param, bytes, "v", v, bytes);
  detail::check_disjoint(op, "m", m, bytes, "v", v, bytes);
  onebit_adam_update_kernel<<<detail::grid_stride_blocks(op, n, kThreads), kThreads, 0, stream>>>(param, m, v, n, step);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace myriad::cuda
