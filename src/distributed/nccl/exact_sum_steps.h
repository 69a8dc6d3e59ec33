// The steps of one exact f32 sum over NCCL (NcclOptions::exact_sums; the encoding is
// ops/exact_sum.h), queued on one stream with nothing read back by the host:
//   1. this rank's block exponents of the input (kernel), 2. their max all-reduce (int32),
//   3. the int64 terms under the group's exponents (kernel), 4. their sum — an all-reduce, or a
//   reduce-scatter into this rank's chunk — and 5. the f32 values of the sums (kernel).
// The collectives are the caller's (NcclCommunicator queues them flat or hierarchically on the
// same stream), so stream order alone sequences the five steps. Integer sums and max are exact
// in any order: the result is the host encoding's bits whatever algorithm NCCL picks.
// Buffers: exponents hold exact_sum_blocks(n) int32, fixed n int64; a reduce-scatter's chunk
// (its size int64) must not overlap fixed. All device memory of the stream's device, alive until
// the stream has run the steps.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <functional>

#include "myriad/core/dtype.h"
#include "myriad/distributed/communicator.h"

namespace myriad::distributed {

struct ExactSumBuffers {
  std::int32_t* exponents = nullptr;
  std::int64_t* fixed = nullptr;
  std::int64_t* chunk = nullptr;  // reduce-scatter only
};

// Queues an all-reduce of `count` elements of `dtype` at `data`, in place, on the stream.
using QueueAllReduce = std::function<void(void* data, std::int64_t count, DType dtype, ReduceOp op)>;
// Queues a sum reduce-scatter of `count` int64 at `input` into this rank's chunk at `output`.
using QueueReduceScatter = std::function<void(const void* input, void* output, std::int64_t count)>;

// data (n) = the exact sum of every rank's data.
void queue_exact_all_reduce(float* data, std::int64_t n, int headroom, const ExactSumBuffers& buffers,
                            cudaStream_t stream, const QueueAllReduce& all_reduce);
// output (chunk.size()) = the exact sums of input's elements [chunk.begin, chunk.end) (this
// rank's chunk_range of n).
void queue_exact_reduce_scatter(const float* input, std::int64_t n, float* output, ChunkRange chunk, int headroom,
                                const ExactSumBuffers& buffers, cudaStream_t stream, const QueueAllReduce& all_reduce,
                                const QueueReduceScatter& reduce_scatter);

}  // namespace myriad::distributed
