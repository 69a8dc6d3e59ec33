// Fused softmax cross-entropy over f32 logits (N, V), one block per row, no probability matrix.
// Rows lie row_length >= V floats apart; the columns past V pad a row to an aligned width (the
// padded vocabulary): they take no part in the sums, and the backward writes them 0.
//
//   forward:  lse = max + log(sum_v exp(x_v - max)),  loss = (max - x[target]) + log(sum) (0 for
//             ignored rows; the same value as lse - x[target], without lse's rounding)
//   backward: grad[v] = (exp(x_v - lse) - [v == target]) * grad_loss  (0 for ignored rows),
//             written over the logits when grad_logits == logits (the probabilities never exist
//             as a tensor of their own).
//   backward, vocabulary shard: the logits are columns [vocab_start, vocab_start + vocab) of the
//             full row and lse is the full row's; the one-hot term applies only when the (global)
//             target falls in this shard; every non-ignored row gets its probabilities' gradient.
// A row's max and sum are block reductions (each thread strides the row, then the fixed-order
// shared-memory tree of common/block_reduce.cuh), so results depend on (N, V) only. Targets are validated on the
// device: a target outside [0, V) that is not ignore_index sets *bad_row to its row (the lowest such row wins) and
// leaves that row's loss NaN; the host launcher reads nothing back (asynchronous), the caller checks bad_row after
// synchronising.
#include <cuda_runtime.h>

#include <algorithm>
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

__global__ void cross_entropy_forward_rows(const float* logits, const std::int32_t* targets, float* losses,
                                           float* lse_out, std::int64_t vocab, std::int64_t row_length,
                                           std::int32_t ignore_index, long long* bad_row) {
  __shared__ float shared[kThreads];
  const std::int64_t row = blockIdx.x;
  const float* x = logits + row * row_length;
  const detail::RowMaxSum row_stats = detail::row_max_and_exp_sum<kThreads>(x, vocab, shared);
  const float max_value = row_stats.max, sum = row_stats.sum;
  if (threadIdx.x != 0) return;
  const float lse = max_value + logf(sum);
  lse_out[row] = lse;
  const std::int32_t target = targets[row];
  if (target == ignore_index) {
    losses[row] = 0.0f;
  } else if (target < 0 || target >= vocab) {
    losses[row] = NAN;
    atomicMin(bad_row, static_cast<long long>(row));  // only the lowest bad row is reported
  } else {
    // (max - x[t]) + log(sum), not lse - x[t]: at |logits| ~ 400 the f32 rounding of max + log(sum)
    // alone carries ~1.5e-5, which the subtraction would keep; this order loses only log(sum)'s.
    losses[row] = (max_value - x[target]) + logf(sum);
  }
}

// `sharded`: the row is columns [vocab_start, vocab_start + vocab) of a wider one (targets are
// global); otherwise vocab_start is 0 and a target outside [0, vocab) zeroes the row.
__global__ void cross_entropy_backward_rows(const float* logits, const std::int32_t* targets, const float* lse,
                                            const float* grad_losses, float* grad_logits, std::int64_t vocab,
                                            std::int64_t row_length, std::int64_t vocab_start, bool sharded,
                                            std::int32_t ignore_index) {
  const std::int64_t row = blockIdx.x;
  const std::int32_t target = targets[row];
  const bool ignored = target == ignore_index || (!sharded && (target < 0 || target >= vocab));
  const float scale = ignored ? 0.0f : grad_losses[row], row_lse = lse[row];
  const std::int64_t local_target = static_cast<std::int64_t>(target) - vocab_start;  // may be outside the row
  const float* x = logits + row * row_length;
  float* g = grad_logits + row * row_length;
  for (std::int64_t v = threadIdx.x; v < vocab; v += kThreads) {
    const float p = expf(x[v] - row_lse);  // read before the (possibly aliased) write
    g[v] = (p - (v == local_target ? 1.0f : 0.0f)) * scale;
  }
  for (std::int64_t v = vocab + threadIdx.x; v < row_length; v += kThreads) g[v] = 0.0f;  // padding
}

void check_rows(const char* op, std::int64_t rows, std::int64_t vocab, std::int64_t row_length) {
  detail::check_count(op, "rows", rows);
  MYRIAD_CHECK(vocab >= 1, op << ": vocab must be >= 1, got " << vocab);
  MYRIAD_CHECK(row_length >= vocab, op << ": row_length " << row_length << " must be >= vocab " << vocab);
  MYRIAD_CHECK(rows <= 0x7fffffff, op << ": " << rows << " rows exceed the grid (one block per row)");
}

}  // namespace

void cross_entropy_forward_f32(const float* logits, const std::int32_t* targets, float* losses, float* lse,
                               long long* bad_row, std::int64_t rows, std::int64_t vocab, std::int64_t row_length,
                               std::int32_t ignore_index, cudaStream_t stream) {
  const char* op = "cross_entropy_forward_f32";
  check_rows(op, rows, vocab, row_length);
  if (rows == 0) return;
  detail::check_pointer(op, "logits", logits, alignof(float));
  detail::check_pointer(op, "targets", targets, alignof(std::int32_t));
  detail::check_pointer(op, "losses", losses, alignof(float));
  detail::check_pointer(op, "lse", lse, alignof(float));
  detail::check_pointer(op, "bad_row", bad_row, alignof(long long));
  const std::size_t row_bytes = static_cast<std::size_t>(rows) * sizeof(float);
  detail::check_disjoint(op, "losses", losses, row_bytes, "lse", lse, row_bytes);
  cross_entropy_forward_rows<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(logits, targets, losses, lse, vocab,
                                                                                   row_length, ignore_index, bad_row);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

namespace {

void launch_backward(const char* op, const float* logits, const std::int32_t* targets, const float* lse,
                     const float* grad_losses, float* grad_logits, std::int64_t rows, std::int64_t vocab,
                     std::int64_t row_length, std::int64_t vocab_start, bool sharded, std::int32_t ignore_index,
                     cudaStream_t stream) {
  check_rows(op, rows, vocab, row_length);
  if (rows == 0) return;
  for (auto [name, ptr] : {std::pair<const char*, const void*>{"logits", logits},
                           {"lse", lse},
                           {"grad_losses", grad_losses},
                           {"grad_logits", grad_logits}}) {
    detail::check_pointer(op, name, ptr, alignof(float));
  }
  detail::check_pointer(op, "targets", targets, alignof(std::int32_t));
  detail::check_same_or_disjoint(op, "grad_logits", grad_logits, "logits", logits,
                                 static_cast<std::size_t>(rows) * static_cast<std::size_t>(row_length) * sizeof(float));
  cross_entropy_backward_rows<<<static_cast<unsigned>(rows), kThreads, 0, stream>>>(
      logits, targets, lse, grad_losses, grad_logits, vocab, row_length, vocab_start, sharded, ignore_index);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void cross_entropy_backward_f32(const float* logits, const std::int32_t* targets, const float* lse,
                                const float* grad_losses, float* grad_logits, std::int64_t rows, std::int64_t vocab,
                                std::int64_t row_length, std::int32_t ignore_index, cudaStream_t stream) {
  launch_backward("cross_entropy_backward_f32", logits, targets, lse, grad_losses, grad_logits, rows, vocab, row_length,
                  0, false, ignore_index, stream);
}

void cross_entropy_backward_shard_f32(const float* logits, const std::int32_t* targets, const float* lse,
                                      const float* grad_losses, float* grad_logits, std::int64_t rows,
                                      std::int64_t vocab, std::int64_t row_length, std::int64_t vocab_start,
                                      std::int32_t ignore_index, cudaStream_t stream) {
  const char* op = "cross_entropy_backward_shard_f32";
  MYRIAD_CHECK(vocab_start >= 0, op << ": vocab_start must be >= 0, got " << vocab_start);
  launch_backward(op, logits, targets, lse, grad_losses, grad_logits, rows, vocab, row_length, vocab_start, true,
                  ignore_index, stream);
}

}  // namespace myriad::cuda
