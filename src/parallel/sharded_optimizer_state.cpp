// ShardedOptimizerState: bucket reduce-scatters from the full gradient buffer into the shard
// (see sharded_optimizer_state.h).
#include "myriad/parallel/sharded_optimizer_state.h"

#include "flat_copy.h"

namespace myriad::parallel {

ShardedOptimizerState::ShardedOptimizerState(nn::GptModel& model, distributed::Communicator& dp,
                                             const DataParallelOptions& options, const optim::AdamWConfig& adam)
    : ParameterUnits(model, dp, options, Sharding{options.bucket_elements, true}) {
  shard_grads_ = placement_.zeros({layout_.shard_elements()});
  attach(adam);
}

void ShardedOptimizerState::launch_bucket(int bucket) {
  const ZeroBucket& b = layout_.buckets()[static_cast<std::size_t>(bucket)];
  Pending p;
  p.bucket = bucket;
  start_reduce_scatter(p, flat_view(store_.flat_grads(), b.begin, b.end),
                       flat_view(shard_grads_, b.shard_offset, b.shard_offset + b.owned.size()));
  pending_.push_back(std::move(p));
}

}  // namespace myriad::parallel
