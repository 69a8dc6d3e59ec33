// A row's maximum and its sum of exp(x - max) over `cols` values, computed by the block's
// kThreads threads (each strides the row, then block_reduce's fixed-order tree, so the result
// depends on `cols` only): the log-sum-exp of a softmax or cross-entropy row. Every thread of the
// block must call it and receives both values; `shared` holds kThreads floats.
#pragma once

#include <cmath>
#include <cstdint>

#include "common/block_reduce.cuh"

namespace myriad::cuda::detail {

struct RowMaxSum {
  float max = 0.0f;  // the row's maximum
  float sum = 0.0f;  // sum of exp(x - max)
};

template <int kThreads>
__device__ RowMaxSum row_max_and_exp_sum(const float* x, std::int64_t cols, float* shared) {
  float max_value = -INFINITY;
  for (std::int64_t c = threadIdx.x; c < cols; c += kThreads) max_value = fmaxf(max_value, x[c]);
  max_value = block_reduce<kThreads>(max_value, shared, Max{});
  float sum = 0.0f;
  for (std::int64_t c = threadIdx.x; c < cols; c += kThreads) sum += expf(x[c] - max_value);
  sum = block_reduce<kThreads>(sum, shared, Add{});
  return {max_value, sum};
}

}  // namespace myriad::cuda::detail
