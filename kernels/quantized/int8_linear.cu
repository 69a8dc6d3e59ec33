// Weight-only INT8 linear on the GPU: y (R, N) = x (R, K) dequant(q, scales)^T + bias, f32.
//
// Each 256-thread block computes a 32 x 32 tile of y (32 rows of x by 32 output channels): it walks
// K in chunks of 32, staging the x chunk and the dequantised weight chunk (q * scale of the
// channel's group, read as int8: a quarter of the f32 weight traffic) in shared memory; each
// thread accumulates 4 outputs in f32 in a fixed k order, so results are deterministic and
// depend on the sizes only. Dequantisation is exact (q * scale, as the CPU op), the sums differ
// from the CPU's BLAS only by their order.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kTile = 32;                  // rows of x and output channels per block, k per chunk
constexpr int kThreads = 256;              // 32 x 8: each thread 4 rows of one channel
constexpr int kRowsPerThread = kTile / 8;  // 4

__global__ void int8_linear_kernel(const float* __restrict__ x, const std::int8_t* __restrict__ q,
                                   const float* __restrict__ scales, const float* __restrict__ bias,
                                   float* __restrict__ y, std::int64_t rows, std::int64_t n, std::int64_t k,
                                   std::int64_t group_size, std::int64_t groups) {
  __shared__ float xs[kTile][kTile + 1];  // [row][k]
  __shared__ float ws[kTile][kTile + 1];  // [channel][k]
  const int tx = threadIdx.x % kTile;     // the channel within the tile (and the k lane for loads)
  const int ty = threadIdx.x / kTile;     // 0..7
  const std::int64_t row0 = static_cast<std::int64_t>(blockIdx.y) * kTile;
  const std::int64_t col0 = static_cast<std::int64_t>(blockIdx.x) * kTile;
  float acc[kRowsPerThread] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (std::int64_t k0 = 0; k0 < k; k0 += kTile) {
    const std::int64_t kk = k0 + tx;
    for (int i = ty; i < kTile; i += 8) {
      const std::int64_t r = row0 + i, c = col0 + i;
      xs[i][tx] = r < rows && kk < k ? x[r * k + kk] : 0.0f;
      float w = 0.0f;
      if (c < n && kk < k) {
        const float s = scales[c * groups + (group_size == 0 ? 0 : kk / group_size)];
        w = static_cast<float>(q[c * k + kk]) * s;
      }
      ws[i][tx] = w;
    }
    __syncthreads();
#pragma unroll 8
    for (int j = 0; j < kTile; ++j) {
      const float w = ws[tx][j];
#pragma unroll
      for (int i = 0; i < kRowsPerThread; ++i) acc[i] = fmaf(xs[ty * kRowsPerThread + i][j], w, acc[i]);
    }
    __syncthreads();
  }
  const std::int64_t c = col0 + tx;
  if (c >= n) return;
  const float b = bias != nullptr ? bias[c] : 0.0f;
  for (int i = 0; i < kRowsPerThread; ++i) {
    const std::int64_t r = row0 + ty * kRowsPerThread + i;
    if (r < rows) y[r * n + c] = acc[i] + b;
  }
}

}  // namespace

void int8_linear_forward_f32(const float* x, const std::int8_t* q, const float* scales, const float* bias, float* y,
                             std::int64_t rows, std::int64_t n, std::int64_t k, std::int64_t group_size,
                             cudaStream_t stream) {
  const char* op = "int8_linear_forward_f32";
  detail::check_count(op, "rows", rows);
  detail::check_count(op, "n", n);
  detail::check_count(op, "k", k);
  detail::check_count(op, "group_size", group_size);
  if (rows == 0 || n == 0) return;
  detail::check_pointer(op, "y", y, alignof(float));
  detail::check_optional_pointer(op, "bias", bias, alignof(float));
  if (k > 0) {
    detail::check_pointer(op, "x", x, alignof(float));
    detail::check_pointer(op, "q", q, 1);
    detail::check_pointer(op, "scales", scales, alignof(float));
    detail::check_disjoint(op, "y", y, static_cast<std::size_t>(rows * n) * sizeof(float), "x", x,
                           static_cast<std::size_t>(rows * k) * sizeof(float));
  }
  const std::int64_t groups = group_size == 0 ? 1 : detail::ceil_div(k, group_size);
  const std::int64_t row_tiles = detail::ceil_div(rows, kTile);
  MYRIAD_CHECK(row_tiles <= 65535, op << ": rows " << rows << " exceed the grid (at most " << 65535L * kTile << ")");
  const dim3 grid(detail::grid_blocks(op, n, kTile), static_cast<unsigned>(row_tiles));
  int8_linear_kernel<<<grid, kThreads, 0, stream>>>(x, q, scales, bias, y, rows, n, k, group_size, groups);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace myriad::cuda
