// ShardedOptimizerState — ZeRO stage 1 (Megatron's distributed optimizer): full values and a full
// gradient buffer for accumulation, but AdamW state only for this rank's shard (8Ψ/N bytes). In
// the step's last micro-batch each final bucket is reduce-scattered into the gradient shard;
// AdamW updates the shard and the updated chunks are all-gathered back into the full values.
// Invariant: each element is owned by one rank of its bucket's group, so the gradient norm is one
// float64 all-reduce of the shards' sums of squares.
#pragma once

#include "myriad/parallel/parameter_units.h"

namespace myriad::parallel {

class ShardedOptimizerState final : public ParameterUnits {
 public:
  ShardedOptimizerState(nn::GptModel& model, distributed::Communicator& dp, const DataParallelOptions& options,
                        const optim::AdamWConfig& adam);

  int stage() const override { return 1; }

 protected:
  void launch_bucket(int bucket) override;
  void after_update() override { gather_updated_values(); }
};

}  // namespace myriad::parallel
