// Per-group bias of a grouped linear layer (ops/grouped_matmul.h), f32: groups of consecutive rows
// [offsets[g], offsets[g + 1]) of a (rows, cols) matrix, offsets in device memory.
//   add_group_bias_f32:               x[r, :] += bias[g, :] for the group g of row r; one thread per
//                                     element, g by binary search over the offsets
//   group_column_sums_accumulate_f32: out[g, :] += sum over the rows of group g of x; a block per
//                                     (32 columns, group): 8 row lanes each sum every 8th row in
//                                     order, then the lanes are added in lane order — the result
//                                     depends on the sizes only; an empty group is not touched
// Launchers declared in cuda/kernels.h.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kColumnsPerBlock = 32, kRowLanes = 8;

// The group g with offsets[g] <= row < offsets[g + 1] (empty groups skipped).
__device__ std::int64_t group_of(const std::int64_t* offsets, std::int64_t groups, std::int64_t row) {
  std::int64_t low = 0, high = groups;  // offsets[low] <= row < offsets[high]
  while (high - low > 1) {
    const std::int64_t mid = low + (high - low) / 2;
    if (offsets[mid] <= row)
      low = mid;
    else
      high = mid;
  }
  return low;
}

__global__ void add_group_bias_kernel(float* x, const float* bias, const std::int64_t* offsets, std::int64_t groups,
                                      std::int64_t rows, std::int64_t cols) {
  const std::int64_t n = rows * cols, stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::int64_t r = i / cols, c = i % cols;
    x[i] += bias[group_of(offsets, groups, r) * cols + c];
  }
}

__global__ void group_column_sums_kernel(const float* x, float* out, const std::int64_t* offsets, std::int64_t cols) {
  __shared__ float partial[kRowLanes][kColumnsPerBlock];
  const std::int64_t g = blockIdx.y, first = offsets[g], last = offsets[g + 1];
  if (first == last) return;  // uniform over the block: no barrier is skipped by part of it
  const int column_in_block = static_cast<int>(threadIdx.x) % kColumnsPerBlock;
  const int lane = static_cast<int>(threadIdx.x) / kColumnsPerBlock;
  const std::int64_t column = static_cast<std::int64_t>(blockIdx.x) * kColumnsPerBlock + column_in_block;
  float sum = 0.0f;
  if (column < cols) {
    for (std::int64_t r = first + lane; r < last; r += kRowLanes) sum += x[r * cols + column];
  }
  partial[lane][column_in_block] = sum;
  __syncthreads();
  if (lane == 0 && column < cols) {
    float total = 0.0f;
    for (int l = 0; l < kRowLanes; ++l) total += partial[l][column_in_block];
    out[g * cols + column] += total;
  }
}

void check_groups(const char* op, const std::int64_t* offsets, std::int64_t groups, std::int64_t rows,
                  std::int64_t cols) {
  detail::check_count(op, "groups", groups);
  detail::check_count(op, "rows", rows);
  detail::check_count(op, "cols", cols);
  MYRIAD_CHECK(groups > 0 || rows == 0, op << ": " << rows << " rows need at least one group");
  if (groups > 0) detail::check_pointer(op, "offsets", offsets, alignof(std::int64_t));
}

}  // namespace

void add_group_bias_f32(float* x, const float* bias, const std::int64_t* offsets, std::int64_t groups,
                        std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  const char* op = "add_group_bias_f32";
  check_groups(op, offsets, groups, rows, cols);
  if (rows == 0 || cols == 0) return;
  detail::check_pointer(op, "x", x, alignof(float));
  detail::check_pointer(op, "bias", bias, alignof(float));
  detail::check_disjoint(op, "x", x, static_cast<std::size_t>(rows * cols) * sizeof(float), "bias", bias,
                         static_cast<std::size_t>(groups * cols) * sizeof(float));
  const auto blocks = detail::grid_stride_blocks(op, rows * cols, kThreads);
  add_group_bias_kernel<<<blocks, kThreads, 0, stream>>>(x, bias, offsets, groups, rows, cols);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

void group_column_sums_accumulate_f32(const float* x, float* out, const std::int64_t* offsets, std::int64_t groups,
                                      std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  const char* op = "group_column_sums_accumulate_f32";
  check_groups(op, offsets, groups, rows, cols);
  if (rows == 0 || cols == 0) return;
  MYRIAD_CHECK(groups <= 65535, op << ": " << groups << " groups, more than a grid's y dimension holds (65535)");
  detail::check_pointer(op, "x", x, alignof(float));
  detail::check_pointer(op, "out", out, alignof(float));
  detail::check_disjoint(op, "out", out, static_cast<std::size_t>(groups * cols) * sizeof(float), "x", x,
                         static_cast<std::size_t>(rows * cols) * sizeof(float));
  const dim3 blocks(detail::grid_blocks(op, cols, kColumnsPerBlock), static_cast<unsigned>(groups));
  group_column_sums_kernel<<<blocks, kColumnsPerBlock * kRowLanes, 0, stream>>>(x, out, offsets, cols);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace myriad::cuda
