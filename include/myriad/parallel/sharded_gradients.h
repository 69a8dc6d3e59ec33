// ShardedGradients — ZeRO stage 2: full values, but gradients are never held in full. A unit's
// gradient buffer exists from its backward until its reduce-scatter has been added into this
// rank's gradient shard (one unit per bucket; at most kMaxInFlight reductions in flight before
// the backward waits for the oldest), so every micro-batch communicates — the price of not
// keeping full gradients. AdamW updates the shard; updated chunks are all-gathered back into the
// full values. Not with pipeline parallelism (it reduces during the backward of every
// micro-batch); refused with the reason.
#pragma once

#include <cstddef>
#include <vector>

#include "myriad/parallel/parameter_units.h"

namespace myriad::parallel {

class ShardedGradients : public ParameterUnits {
 public:
  ShardedGradients(nn::GptModel& model, distributed::Communicator& dp, const DataParallelOptions& options,
                   const optim::AdamWConfig& adam);

  int stage() const override { return 2; }
  bool reduces_every_micro_batch() const override { return true; }
  void acquire(int unit, nn::Pass pass) override;

 protected:
  // Reductions allowed in flight before the backward waits for the oldest (bounds the transient
  // gradient buffers to a few units).
  static constexpr std::size_t kMaxInFlight = 2;

  // Everything but attach() (ShardedParameters adds its value shard first).
  ShardedGradients(nn::GptModel& model, distributed::Communicator& dp, const DataParallelOptions& options);
  // Before a unit's backward: its gradient buffer, bound to the unit's gradient views.
  void open_grad_buffer(int unit, nn::Pass pass);
  void launch_bucket(int bucket) override;
  void after_update() override { gather_updated_values(); }

 private:
  std::vector<Tensor> unit_grads_;  // per unit: the gradient buffer while its backward runs
};

}  // namespace myriad::parallel
