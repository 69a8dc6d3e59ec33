// Device helpers shared by the flash attention kernels (CUDA-core and tensor-core): f32 loads and
// stores of f32 / bf16 / f16 elements (stores round to nearest even; store_or_add adds into the
// element first when the backward accumulates), and the backward's first pass
//   delta_r = dO_r . O_r   (f32 sum over the head dim, one thread per query row)
// launched as launch_delta<T, D>(out, grad_out, delta, rows, stream).
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/launch_checks.h"

namespace myriad::cuda {
namespace {  // per translation unit, like the kernels that use them

__device__ __forceinline__ float to_float(float x) { return x; }
__device__ __forceinline__ float to_float(__nv_bfloat16 x) { return __bfloat162float(x); }
__device__ __forceinline__ float to_float(__half x) { return __half2float(x); }
__device__ __forceinline__ void store(float* p, float x) { *p = x; }
__device__ __forceinline__ void store(__nv_bfloat16* p, float x) { *p = __float2bfloat16_rn(x); }
__device__ __forceinline__ void store(__half* p, float x) { *p = __float2half_rn(x); }
// *p = x, or *p += x (in f32, then rounded) with `accumulate`.
template <typename T>
__device__ __forceinline__ void store_or_add(T* p, float x, bool accumulate) {
  store(p, accumulate ? to_float(*p) + x : x);
}

template <typename T, int D>
__global__ void flash_delta(const T* out, const T* grad_out, float* delta, std::int64_t rows) {
  const std::int64_t r = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r >= rows) return;
  float sum = 0.0f;
  for (int d = 0; d < D; ++d) sum += to_float(out[r * D + d]) * to_float(grad_out[r * D + d]);
  delta[r] = sum;
}

template <typename T, int D>
void launch_delta(const T* out, const T* grad_out, float* delta, std::int64_t rows, cudaStream_t stream) {
  flash_delta<T, D><<<static_cast<unsigned>(detail::ceil_div(rows, 256)), 256, 0, stream>>>(out, grad_out, delta, rows);
}

}  // namespace
}  // namespace myriad::cuda
