// The exact-sum steps over NCCL (see exact_sum_steps.h): the kernels of kernels/comm/exact_sum.cu
// around the caller's collectives, all on one stream.
#include "exact_sum_steps.h"

#include "myriad/cuda/kernels.h"
#include "myriad/ops/exact_sum.h"

namespace myriad::distributed {

namespace {
// Steps 1-3: the group's exponents and this rank's int64 terms of data (n).
void queue_terms(const float* data, std::int64_t n, int headroom, const ExactSumBuffers& buffers, cudaStream_t stream,
                 const QueueAllReduce& all_reduce) {
  cuda::exact_sum_exponents_f32(data, n, buffers.exponents, stream);
  all_reduce(buffers.exponents, exact_sum_blocks(n), DType::i32, ReduceOp::max);
  cuda::to_exact_fixed_f32(data, n, buffers.exponents, headroom, buffers.fixed, stream);
}
}  // namespace

void queue_exact_all_reduce(float* data, std::int64_t n, int headroom, const ExactSumBuffers& buffers,
                            cudaStream_t stream, const QueueAllReduce& all_reduce) {
  if (n == 0) return;
  queue_terms(data, n, headroom, buffers, stream, all_reduce);
  all_reduce(buffers.fixed, n, DType::i64, ReduceOp::sum);
  cuda::from_exact_fixed_f32(buffers.fixed, 0, n, buffers.exponents, headroom, data, stream);
}

void queue_exact_reduce_scatter(const float* input, std::int64_t n, float* output, ChunkRange chunk, int headroom,
                                const ExactSumBuffers& buffers, cudaStream_t stream, const QueueAllReduce& all_reduce,
                                const QueueReduceScatter& reduce_scatter) {
  if (n == 0) return;
  queue_terms(input, n, headroom, buffers, stream, all_reduce);
  reduce_scatter(buffers.fixed, buffers.chunk, n);
  cuda::from_exact_fixed_f32(buffers.chunk, chunk.begin, chunk.size(), buffers.exponents, headroom, output, stream);
}

}  // namespace myriad::distributed
