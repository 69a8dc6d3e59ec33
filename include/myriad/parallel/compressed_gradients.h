// CompressedGradients — error-feedback gradient compression (training.gradient_compression:
// int8 | topk): the bucket reductions are off, and finish_step exchanges the gradients once
// through distributed::CompressedSum (int8 with a scale per 256 elements, or the largest
// topk_ratio of each chunk as (index, value) pairs), each rank's and each chunk owner's
// compression error carried into the next step. Every rank decodes the same bytes, so the
// replicas stay bitwise identical; the optimizer then steps as with exact gradients. Where the
// parameters live: on a device the codes are kernels and the exchanges NCCL's, with no host wait.
//
// ep 1: the whole flat gradient buffer is one compressed sum over dp. ep > 1 (a mixture of experts
// with expert parallelism): the dense gradients — the ranges of the dense buckets, gathered into
// one buffer in bucket order — are one compressed sum over dp, and each expert bucket is summed
// exactly over the expert-data group (the ranks holding the same experts), as ExactReduction does:
// the two kinds of gradient sum over different groups, and the experts are the smaller part.
//
// ZeRO 1-3 (sharded optimizer state; 2/3 also sharded gradients): no exchange at finish_step —
// the parameter units' bucket reductions run, each dense bucket's reduce-scatter replaced by a
// distributed::CompressedReduceScatter over dp: each rank encodes the chunk of the bucket that
// each shard owner holds, keeping the error of what it sent per element on the sender, and each
// owner sums the decoded chunks of its shard; no second compressed phase, since a rank needs only
// its shard (the optimizer updates it, and the all-gathers of updated values stay exact). Expert
// buckets reduce-scatter exactly over the expert-data group. The error buffers cover every
// element of the dense buckets (4 bytes per element on every rank, whatever the stage): the
// error is the sender's, and each rank sends to every element — so at ZeRO-2/3 they cost as much
// as the full gradient buffer those stages avoid. Not checkpointed (zero at a resume), as at ZeRO 0.
#pragma once

#include <memory>
#include <vector>

#include "myriad/distributed/compressed_sum.h"
#include "myriad/parallel/gradient_exchange.h"

namespace myriad::parallel {

class CompressedGradients final : public GradientExchange {
 public:
  // `units`: any ZeRO stage, on the host or a device.
  CompressedGradients(ParameterUnits& units, const distributed::CompressionSpec& spec);

  const char* name() const override { return distributed::compression_name(spec_.kind); }
  bool reduces_exactly() const override { return false; }
  bool reduces_in_buckets() const override { return sharded_; }  // ZeRO 1-3: compressed reduce-scatters
  void finish_step() override;
  optim::OptimizerStepStats optimizer_step(float lr, float unscale) override { return units_.exact_step(lr, unscale); }

 private:
  struct Range {
    std::int64_t begin = 0, end = 0;  // flat element range
  };

  ParameterUnits& units_;
  distributed::CompressionSpec spec_;
  bool sharded_ = false;                              // ZeRO 1-3: the units' reduce-scatters are compressed instead
  distributed::Communicator* expert_data_ = nullptr;  // ep > 1: the expert buckets' group
  std::vector<Range> dense_, experts_;                // ep > 1: bucket ranges of each kind
  Tensor dense_grads_;                                // ep > 1: the dense ranges back to back
  std::unique_ptr<distributed::CompressedSum> sum_;
};

}  // namespace myriad::parallel
