// FP8 quantisation on the GPU (ops/fp8.h fp8_quantize): out = fp8(x * scale) with CUDA's
// saturating round-to-nearest-even conversion (__NV_SATFINITE — the CPU reference's core/fp8.h
// rounding, so codes are bit-identical), optionally the transposed copy, and the running amax.
// The scale is read from device memory by every thread (one cached load), not passed by value.
//
// Tiles of 32 x 32 elements, one per block of 32 x 8 threads (each thread 4 rows of one column):
// the tile is read and its codes written row-major with coalesced accesses, the codes staged in
// shared memory and written transposed, again coalesced (a direct strided store would cost one
// memory transaction per byte). The amax is a max over non-negative floats done on their bit
// patterns (an unsigned compare orders them as floats, and NaN's pattern sorts above infinity, so
// a NaN anywhere leaves NaN): a block reduction, then one atomicMax per block.
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kTile = 32;
constexpr int kRowsPerPass = 8;  // blockDim.y
constexpr int kThreads = kTile * kRowsPerPass;

struct MaxBits {
  __device__ unsigned operator()(unsigned a, unsigned b) const { return a > b ? a : b; }
};

__global__ void fp8_quantize_kernel(const float* __restrict__ x, std::uint8_t* __restrict__ out,
                                    std::uint8_t* __restrict__ out_t, unsigned* __restrict__ amax_bits,
                                    std::int64_t rows, std::int64_t cols, const float* __restrict__ scale_pointer,
                                    __nv_fp8_interpretation_t format) {
  const float scale = *scale_pointer;
  __shared__ std::uint8_t codes[kTile][kTile + 4];
  __shared__ unsigned shared[kThreads];
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * kTile;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  const int tx = threadIdx.x, ty = threadIdx.y;
  unsigned largest = 0;
  for (int r = ty; r < kTile; r += kRowsPerPass) {
    const std::int64_t row = row0 + r, col = col0 + tx;
    if (row < rows && col < cols) {
      const float value = x[row * cols + col];
      largest = MaxBits{}(largest, __float_as_uint(fabsf(value)));
      const std::uint8_t code = __nv_cvt_float_to_fp8(value * scale, __NV_SATFINITE, format);
      out[row * cols + col] = code;
      codes[r][tx] = code;
    }
  }
  if (out_t != nullptr) {
    __syncthreads();
    // Transposed: thread (tx, ty) writes column col0 + c's codes for rows row0 + tx.
    for (int c = ty; c < kTile; c += kRowsPerPass) {
      const std::int64_t col = col0 + c, row = row0 + tx;
      if (row < rows && col < cols) out_t[col * rows + row] = codes[tx][c];
    }
  }
  if (amax_bits == nullptr) return;  // uniform across the block: no thread reaches the reduction
  const int thread = ty * kTile + tx;
  shared[thread] = largest;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (thread < half) shared[thread] = MaxBits{}(shared[thread], shared[thread + half]);
    __syncthreads();
  }
  if (thread == 0) atomicMax(amax_bits, shared[0]);
}

}  // namespace

void fp8_quantize_f32(const float* x, std::uint8_t* out, std::uint8_t* out_t, float* amax, std::int64_t rows,
                      std::int64_t cols, const float* scale, bool e5m2, cudaStream_t stream) {
  const char* op = "fp8_quantize_f32";
  detail::check_count(op, "rows", rows);
  detail::check_count(op, "cols", cols);
  if (rows == 0 || cols == 0) return;
  detail::check_pointer(op, "x", x, alignof(float));
  detail::check_pointer(op, "out", out, 1);
  detail::check_pointer(op, "scale", scale, alignof(float));
  if (amax != nullptr) detail::check_pointer(op, "amax", amax, alignof(float));
  const std::int64_t tiles_x = detail::ceil_div(cols, kTile), tiles_y = detail::ceil_div(rows, kTile);
  MYRIAD_CHECK(tiles_y <= 65535, op << ": " << rows << " rows exceed the grid's " << 65535 * kTile);
  const dim3 grid(static_cast<unsigned>(tiles_x), static_cast<unsigned>(tiles_y));
  const dim3 block(kTile, kRowsPerPass);
  fp8_quantize_kernel<<<grid, block, 0, stream>>>(x, out, out_t, reinterpret_cast<unsigned*>(amax), rows, cols, scale,
                                                  e5m2 ? __NV_E5M2 : __NV_E4M3);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace myriad::cuda
