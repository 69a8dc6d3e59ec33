// ParameterUnits: the shared step machinery of every ZeRO stage — bucket launches from the unit
// hooks, reductions in flight, the tp-partial sums and the optimizer step (see parameter_units.h).
#include "myriad/parallel/parameter_units.h"

#include <algorithm>

#include "flat_copy.h"
#include "myriad/distributed/scalar_reduce.h"
#include "myriad/nn/linear.h"
#include "myriad/ops/elementwise.h"

namespace myriad::parallel {

ParameterUnits::ParameterUnits(nn::GptModel& model, distributed::Communicator& dp, const DataParallelOptions& options,
                               Sharding sharding)
    : model_(model),
      store_(model.parameters()),
      placement_(model.parameters().placement()),
      dp_(dp),
      expert_dp_(options.expert_data_parallel ? *options.expert_data_parallel : dp),
      options_(options),
      layout_(model.units(), sharding.bucket_elements, sharding.sharded ? dp.size() : 1,
              sharding.sharded ? dp.rank() : 0, sharding.sharded ? expert_dp_.size() : 1,
              sharding.sharded ? expert_dp_.rank() : 0),
      schedule_(layout_, options.pipelined, options.deferred_units) {
  std::vector<ParamSpan> spans;
  for (const nn::Parameter& p : store_.all()) spans.push_back({p.offset, shape_numel(p.shape)});
  segments_ = layout_.segments(spans);
}

void ParameterUnits::attach(const optim::AdamWConfig& adam) {
  std::vector<optim::OptimizerSegment> optimizer_segments;
  for (const ZeroSegment& s : segments_) {
    optimizer_segments.push_back(
        {owned_values(s), owned_grads(s), store_[s.param].kind, store_[s.param].primary, s.expert});
  }
  optimizer_ = std::make_unique<optim::AdamWOptimizer>(std::move(optimizer_segments), adam);
  model_.set_hooks(this);
  attached_ = true;
}

void ParameterUnits::write_compute_copies(DType format, const Tensor& rounded, const Tensor& narrow) {
  if (stage() != 0) return;  // the update writes this rank's shard; gathers write the rest
  std::vector<Tensor> rounded_views, narrow_views;
  for (const ZeroSegment& s : segments_) {
    rounded_views.push_back(flat_view(rounded, s.begin, s.end));
    narrow_views.push_back(
        Tensor::from_storage(narrow.storage(), {s.end - s.begin}, {1}, narrow.offset() + s.begin, format));
  }
  optimizer_->set_compute_copies(format, std::move(rounded_views), std::move(narrow_views));
}

ParameterUnits::~ParameterUnits() {
  if (attached_) model_.set_hooks(nullptr);
  for (Pending& p : pending_) {
    try {
      if (p.work) p.work->wait();
    } catch (...) {  // destructor: the error was or will be reported by the failing rank
    }
  }
}

Tensor ParameterUnits::owned_values(const ZeroSegment& s) const {
  return flat_view(store_.flat_values(), s.begin, s.end);
}

Tensor ParameterUnits::owned_grads(const ZeroSegment& s) const {
  return flat_view(shard_grads_, s.shard_position, s.shard_position + (s.end - s.begin));
}

distributed::Communicator& ParameterUnits::comm_of(const ZeroBucket& bucket) const {
  return bucket.expert ? expert_dp_ : dp_;
}

void ParameterUnits::compress_dense_reduce_scatters(const CompressionSpec& spec) {
  MYRIAD_CHECK(stage() >= 1, "compressed reduce-scatters need a sharded ZeRO stage (1-3), this is stage " << stage());
  compressed_.clear();
  compressed_.resize(layout_.buckets().size());
  for (std::size_t i = 0; i < layout_.buckets().size(); ++i) {
    const ZeroBucket& b = layout_.buckets()[i];
    if (!b.expert) {
      compressed_[i] = std::make_unique<distributed::CompressedReduceScatter>(dp_, b.size(), spec, placement_);
    }
  }
}

void ParameterUnits::start_reduce_scatter(Pending& p, const Tensor& in, Tensor out) {
  const ZeroBucket& b = layout_.buckets()[static_cast<std::size_t>(p.bucket)];
  if (!compressed_.empty() && compressed_[static_cast<std::size_t>(p.bucket)]) {
    compressed_[static_cast<std::size_t>(p.bucket)]->reduce_scatter(in, out);  // ordered on the stream
    return;                                                                    // p.work stays empty: done
  }
  p.work = comm_of(b).reduce_scatter_async(in, out);
}

void ParameterUnits::track(std::int64_t delta_bytes) {
  buffer_bytes_ += delta_bytes;
  buffer_peak_ = std::max(buffer_peak_, buffer_bytes_);
}

double ParameterUnits::sum_over_model_parallel(double value) const {
  for (distributed::Communicator* group : options_.model_parallel) {
    if (group->size() > 1) value = distributed::sum_over_ranks(*group, value);
  }
  return value;
}

void ParameterUnits::zero_grads() {
  store_.zero_grads();  // the full buffer where the stage keeps one
  if (shard_grads_.defined()) zero(shard_grads_);
  schedule_.begin_step();
}

void ParameterUnits::grads_ready(int unit) {
  const int bucket = schedule_.unit_final(unit);
  if (bucket >= 0) launch(bucket);
}

void ParameterUnits::launch(int bucket) {
  schedule_.launched(bucket);
  launch_bucket(bucket);
}

void ParameterUnits::retire(Pending& p) {
  if (p.work) p.work->wait_on_stream();  // what reads the result runs on the stream (a GPU's host runs on)
  if (!p.reduced.defined()) return;
  const ZeroBucket& b = layout_.buckets()[static_cast<std::size_t>(p.bucket)];
  Tensor shard = flat_view(shard_grads_, b.shard_offset, b.shard_offset + b.owned.size());
  nn::add_into(shard, p.reduced);
  track(-static_cast<std::int64_t>(p.reduced.nbytes() + p.unit_grads.nbytes()));
  p.reduced = Tensor();
  p.unit_grads = Tensor();
}

void ParameterUnits::retire_completed(std::size_t keep_in_flight) {
  while (!pending_.empty() &&
         (pending_.size() > keep_in_flight || !pending_.front().work || pending_.front().work->completed())) {
    retire(pending_.front());
    pending_.pop_front();
  }
}

void ParameterUnits::reduce_gradients() {
  MYRIAD_CHECK(pipelined(), "DataParallel::reduce_gradients needs pipelined");
  for (int bucket : schedule_.not_launched()) launch(bucket);
  retire_completed(0);
}

void ParameterUnits::finish_backward() { retire_completed(0); }

void ParameterUnits::sum_tp_partial_grads() {
  distributed::Communicator* tp = options_.tensor_parallel;
  if (tp == nullptr || tp->size() == 1) return;
  // Every tp rank holds the same segments of these parameters (dp shards them, not tp).
  std::vector<distributed::WorkHandle> sums;
  const std::vector<optim::OptimizerSegment>& segments = optimizer_->segments();
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    if (store_[segments_[i].param].tp_partial) sums.push_back(tp->all_reduce_async(segments[i].grad));
  }
  for (distributed::WorkHandle& w : sums) w->wait_on_stream();
}

double ParameterUnits::gradient_sum_squares() const {
  // Every element is owned once over the dp group (dense shards split it; expert shards split
  // each ep rank's experts over its expert-data group).
  return distributed::sum_over_ranks(dp_, optimizer_->grad_sum_squares());
}

optim::OptimizerStepStats ParameterUnits::apply_update(float lr, double sum_squares, float unscale) {
  optim::OptimizerStepStats stats = optimizer_->step(lr, sum_squares, unscale);
  if (!stats.skipped) after_update();
  return stats;
}

optim::OptimizerStepStats ParameterUnits::exact_step(float lr, float unscale) {
  return apply_update(lr, sum_over_model_parallel(gradient_sum_squares()), unscale);
}

void ParameterUnits::gather_updated_values() {
  std::vector<distributed::WorkHandle> gathers;
  for (const ZeroBucket& b : layout_.buckets()) {
    gathers.push_back(comm_of(b).all_gather_async(flat_view(store_.flat_values(), b.owned.begin, b.owned.end),
                                                  flat_view(store_.flat_values(), b.begin, b.end)));
  }
  for (distributed::WorkHandle& g : gathers) g->wait_on_stream();
}

}  // namespace myriad::parallel
