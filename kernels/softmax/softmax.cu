// Row softmax over f32 (N, L), one block per row (ops/softmax.h's contract).
//
//   forward:  out[l] = exp(x[l] - max) / sum_l' exp(x[l'] - max)   (-inf entries give 0)
//   backward: grad_x[l] = out[l] * (grad_out[l] - sum_l' grad_out[l'] out[l'])
// A row's max and sums are block reductions (each thread strides the row, then the fixed-order
// shared-memory tree of common/block_reduce.cuh), so results depend on (N, L) only. out may be x
// and grad_x may be grad_out (each element is read before it is written by the same thread).
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <utility>

#include "common/row_reduce.cuh"
#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void softmax_forward_rows(const float* x_all, float* out_all, std::int64_t cols) {
  __shared__ float shared[kThreads];
  const float* x = x_all + blockIdx.x * cols;
  float* out = out_all + blockIdx.x * cols;
  const detail::RowMaxSum row_stats = detail::row_max_and_exp_sum<kThreads>(x, cols, shared);
  const float inverse = 1.0f / row_stats.sum;
  for (std::int64_t l = threadIdx.x; l < cols; l += kThreads) out[l] = expf(x[l] - row_stats.max) * inverse;
}

__global__ void softmax_backward_rows(const float* out_all, const float* grad_out_all, float* grad_x_all,
                                      std::int64_t cols) {
  __shared__ float shared[kThreads];
  const std::int64_t offset = blockIdx.x * cols;
  const float* out = out_all + offset;
  const float* g = grad_out_all + offset;
  float* grad_x = grad_x_all + offset;
  float dot = 0.0f;
  for (std::int64_t l = threadIdx.x; l < cols; l += kThreads) dot += g[l] * out[l];
  dot = detail::block_reduce<kThreads>(dot, shared, detail::Add{});
  for (std::int64_t l = threadIdx.x; l < cols; l += kThreads) grad_x[l] = out[l] * (g[l] - dot);
}

void check_rows(const char* op, std::int64_t rows, std::int64_t cols) {
  detail::check_count(op, "rows", rows);
  MYRIAD_CHECK(cols >= 1, op << ": cols must be >= 1, got " << cols);
  MYRIAD_CHECK(rows <= 0x7fffffff, op << ": " << rows << " rows exceed the grid (one block per row)");
}

}  // namespace

void softmax_forward_f32(const float* x, float* out, std::int64_t rows, std::int64_t cols, cudaStream_t stream) {
  const char* op = "softmax_forward_f32";
  check_rows(op, rows, cols);
  if (rows == 0) return;
  detail::check_pointer(op, "x", x, alignof(float));
  detail::check_pointer(op, "out", out, alignof(float));
  detail::check_same_or_disjoint(op, "out", out, "x", x,
                                 static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) * sizeof(float));
  softmax_forward_rows<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(x, out, cols);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

void softmax_backward_f32(const float* out, const float* grad_out, float* grad_x, std::int64_t rows, std::int64_t cols,
                          cudaStream_t stream) {
  const char* op = "softmax_backward_f32";
  check_rows(op, rows, cols);
  if (rows == 0) return;
  for (auto [name, ptr] :
       {std::pair<const char*, const void*>{"out", out}, {"grad_out", grad_out}, {"grad_x", grad_x}}) {
    detail::check_pointer(op, name, ptr, alignof(float));
  }
  const std::size_t bytes = static_cast<std::size_t>(rows) * static_cast<std::size_t>(cols) * sizeof(float);
  detail::check_same_or_disjoint(op, "grad_x", grad_x, "grad_out", grad_out, bytes);
  detail::check_same_or_disjoint(op, "grad_x", grad_x, "out", out, bytes);
  softmax_backward_rows<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(out, grad_out, grad_x, cols);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace myriad::cuda
