// FP8 quantisation on the GPU (ops/fp8.h fp8_quantize): out = fp8(x * scale) with CUDA's
// saturating round-to-nearest-even conversion (__NV_SATFINITE — the CPU reference's core/fp8.h
// rounding, so codes are bit-identical), optionally the transposed copy, and the running amax.
//
// One thread per element in a grid-stride loop over row-major x. The amax is a max over
// non-negative floats done on their bit patterns (an unsigned compare orders them as floats, and
// NaN's pattern sorts above infinity, so a NaN anywhere leaves NaN): a block reduction, then one
// atomicMax per block. The transposed writes are strided (a simple kernel: the quantisation
// runs once per operand and GEMM, and its bytes are a quarter of the f32 input's).
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/block_reduce.cuh"
#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 4096;

struct MaxBits {
  __device__ unsigned operator()(unsigned a, unsigned b) const { return a > b ? a : b; }
};

__global__ void fp8_quantize_kernel(const float* __restrict__ x, std::uint8_t* __restrict__ out,
                                    std::uint8_t* __restrict__ out_t, unsigned* __restrict__ amax_bits,
                                    std::int64_t rows, std::int64_t cols, float scale,
                                    __nv_fp8_interpretation_t format) {
  __shared__ unsigned shared[kThreads];
  const std::int64_t total = rows * cols;
  unsigned largest = 0;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total;
       e += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const float value = x[e];
    largest = MaxBits{}(largest, __float_as_uint(fabsf(value)));
    const std::uint8_t code = __nv_cvt_float_to_fp8(value * scale, __NV_SATFINITE, format);
    out[e] = code;
    if (out_t != nullptr) out_t[(e % cols) * rows + e / cols] = code;
  }
  if (amax_bits == nullptr) return;  // uniform across the block: no thread reaches the reduction
  const unsigned block_largest = detail::block_reduce<kThreads>(largest, shared, MaxBits{});
  if (threadIdx.x == 0) atomicMax(amax_bits, block_largest);
}

}  // namespace

void fp8_quantize_f32(const float* x, std::uint8_t* out, std::uint8_t* out_t, float* amax, std::int64_t rows,
                      std::int64_t cols, float scale, bool e5m2, cudaStream_t stream) {
  const char* op = "fp8_quantize_f32";
  detail::check_count(op, "rows", rows);
  detail::check_count(op, "cols", cols);
  if (rows == 0 || cols == 0) return;
  detail::check_pointer(op, "x", x, alignof(float));
  detail::check_pointer(op, "out", out, 1);
  if (amax != nullptr) detail::check_pointer(op, "amax", amax, alignof(float));
  const unsigned blocks =
      static_cast<unsigned>(std::min<std::int64_t>(detail::ceil_div(rows * cols, kThreads), kMaxBlocks));
  fp8_quantize_kernel<<<blocks, kThreads, 0, stream>>>(x, out, out_t, reinterpret_cast<unsigned*>(amax), rows, cols,
                                                       scale, e5m2 ? __NV_E5M2 : __NV_E4M3);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace myriad::cuda
