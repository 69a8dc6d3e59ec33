// ShardedGradients: per-unit gradient buffers reduce-scattered into the shard as each unit's
// backward ends (see sharded_gradients.h).
#include "myriad/parallel/sharded_gradients.h"

namespace myriad::parallel {

ShardedGradients::ShardedGradients(nn::GptModel& model, distributed::Communicator& dp,
                                   const DataParallelOptions& options)
    : ParameterUnits(model, dp, options, Sharding{1, true}) {  // one unit per bucket
  MYRIAD_CHECK(!options.pipelined, "parallel.zero_stage " << options.zero_stage
                                                          << " reduces gradients during the backward; with "
                                                          << "pipeline parallelism use zero_stage 0 or 1");
  shard_grads_ = placement_.zeros({layout_.shard_elements()});
  unit_grads_.resize(model.units().size());
  store_.drop_flat_grads();
}

ShardedGradients::ShardedGradients(nn::GptModel& model, distributed::Communicator& dp,
                                   const DataParallelOptions& options, const optim::AdamWConfig& adam)
    : ShardedGradients(model, dp, options) {
  attach(adam);
}

void ShardedGradients::open_grad_buffer(int unit, nn::Pass pass) {
  const auto u = static_cast<std::size_t>(unit);
  if (pass == nn::Pass::forward || unit_grads_[u].defined()) return;
  const nn::ParamUnit& range = model_.units()[u];
  unit_grads_[u] = placement_.zeros({range.size()});
  track(static_cast<std::int64_t>(unit_grads_[u].nbytes()));
  store_.rebind(range.begin, range.end, Tensor(), unit_grads_[u]);
}

void ShardedGradients::acquire(int unit, nn::Pass pass) {
  open_grad_buffer(unit, pass);
  retire_completed(kMaxInFlight);
}

void ShardedGradients::launch_bucket(int bucket) {
  const ZeroBucket& b = layout_.buckets()[static_cast<std::size_t>(bucket)];
  const auto u = static_cast<std::size_t>(b.first_unit);  // one unit per bucket
  const nn::ParamUnit& unit = model_.units()[u];
  MYRIAD_CHECK(unit_grads_[u].defined(), "DataParallel: unit '" << unit.name << "' reported final gradients "
                                                                << "without a gradient buffer");
  Pending p;
  p.bucket = bucket;
  p.unit_grads = unit_grads_[u];
  unit_grads_[u] = Tensor();
  store_.unbind(unit.begin, unit.end, false, true);
  p.reduced = placement_.empty({b.owned.size()});
  track(static_cast<std::int64_t>(p.reduced.nbytes()));
  start_reduce_scatter(p, p.unit_grads, p.reduced);
  pending_.push_back(std::move(p));
  retire_completed(kMaxInFlight);
}

}  // namespace myriad::parallel
