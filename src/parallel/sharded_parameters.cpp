// ShardedParameters: the value shard, unit gathers with prefetch and 16-bit gathers (see
// sharded_parameters.h).
#include "myriad/parallel/sharded_parameters.h"

#include "flat_copy.h"
#include "myriad/ops/elementwise.h"

namespace myriad::parallel {

ShardedParameters::ShardedParameters(nn::GptModel& model, distributed::Communicator& dp,
                                     const DataParallelOptions& options, const optim::AdamWConfig& adam)
    : ShardedGradients(model, dp, options) {
  shard_values_ = placement_.empty({layout_.shard_elements()});
  for (const ZeroBucket& b : layout_.buckets()) {
    Tensor mine = flat_view(shard_values_, b.shard_offset, b.shard_offset + b.owned.size());
    copy_floats(flat_view(store_.flat_values(), b.owned.begin, b.owned.end), mine);
  }
  store_.drop_flat_values();
  const std::size_t units = model.units().size();
  unit_values_.resize(units);
  unit_values_16_.resize(units);
  value_refs_.assign(units, 0);
  value_gathers_.resize(units);
  if (gathers_16_bit()) {
    shard_values_16_ = placement_.empty({layout_.shard_elements()}, options_.compute_format);
    refresh_16_bit_shard();
  }
  attach(adam);
}

Tensor ShardedParameters::owned_values(const ZeroSegment& s) const {
  return flat_view(shard_values_, s.shard_position, s.shard_position + (s.end - s.begin));
}

void ShardedParameters::acquire(int unit, nn::Pass pass) {
  open_grad_buffer(unit, pass);
  if (pass != nn::Pass::backward_grads && !all_gathered_) {
    if (value_refs_[static_cast<std::size_t>(unit)]++ == 0) ensure_values(unit);
    const int next = pass == nn::Pass::forward ? unit + 1 : unit - 1;
    const bool next_reads_values = next != 0 || model_.config().tie_embeddings;
    if (next >= 0 && next < static_cast<int>(model_.units().size()) && next_reads_values) prefetch_values(next);
  }
  retire_completed(kMaxInFlight);
}

void ShardedParameters::release(int unit, nn::Pass pass) {
  if (pass == nn::Pass::backward_grads || all_gathered_) return;
  if (--value_refs_[static_cast<std::size_t>(unit)] == 0) free_values(unit);
}

void ShardedParameters::finish_backward() {
  ShardedGradients::finish_backward();
  // A prefetched unit that the pass never acquired is dropped here.
  for (std::size_t u = 0; u < unit_values_.size(); ++u) {
    if (value_refs_[u] != 0 || !unit_values_[u].defined() || all_gathered_) continue;
    if (value_gathers_[u]) value_gathers_[u]->wait_on_stream();  // its memory is reused in stream order
    value_gathers_[u].reset();
    free_values(static_cast<int>(u));
  }
}

void ShardedParameters::free_values(int unit) {
  const auto u = static_cast<std::size_t>(unit);
  store_.unbind(model_.units()[u].begin, model_.units()[u].end, true, false);
  track(-static_cast<std::int64_t>(unit_values_[u].nbytes()));
  unit_values_[u] = Tensor();
  if (unit_values_16_[u].defined()) {  // a prefetch dropped before its values were widened
    track(-static_cast<std::int64_t>(unit_values_16_[u].nbytes()));
    unit_values_16_[u] = Tensor();
  }
}

void ShardedParameters::refresh_16_bit_shard() {
  if (!gathers_16_bit() || shard_values_.numel() == 0) return;
  copy(shard_values_, shard_values_16_);  // rounds to nearest even
}

void ShardedParameters::prefetch_values(int unit) {
  const auto u = static_cast<std::size_t>(unit);
  if (unit_values_[u].defined()) return;
  const nn::ParamUnit& range = model_.units()[u];
  const ZeroBucket& b = layout_.buckets()[static_cast<std::size_t>(layout_.bucket_of_unit(unit))];
  unit_values_[u] = placement_.empty({range.size()});
  track(static_cast<std::int64_t>(unit_values_[u].nbytes()));
  if (gathers_16_bit()) {
    const DType format = options_.compute_format;
    unit_values_16_[u] = placement_.empty({range.size()}, format);
    track(static_cast<std::int64_t>(unit_values_16_[u].nbytes()));
    Tensor mine = Tensor::from_storage(shard_values_16_.storage(), {b.owned.size()}, {1},
                                       shard_values_16_.offset() + b.shard_offset, format);
    value_gathers_[u] = comm_of(b).all_gather_async(mine, unit_values_16_[u]);
  } else {
    value_gathers_[u] = comm_of(b).all_gather_async(
        flat_view(shard_values_, b.shard_offset, b.shard_offset + b.owned.size()), unit_values_[u]);
  }
  store_.rebind(range.begin, range.end, unit_values_[u], Tensor());
}

void ShardedParameters::ensure_values(int unit) {
  const auto u = static_cast<std::size_t>(unit);
  prefetch_values(unit);  // no-op when already gathered or in flight
  if (!value_gathers_[u]) return;
  value_gathers_[u]->wait_on_stream();  // the layer reads the values on the stream (a GPU's host runs on)
  value_gathers_[u].reset();
  if (unit_values_16_[u].defined()) {
    copy(unit_values_16_[u], unit_values_[u]);  // widening: exact
    track(-static_cast<std::int64_t>(unit_values_16_[u].nbytes()));
    unit_values_16_[u] = Tensor();
  } else {
    round_to_format(unit_values_[u], options_.compute_format);
  }
}

void ShardedParameters::full_values(Tensor& full) { gather_from_shard(shard_values_, full); }

void ShardedParameters::load_values(const Tensor& host_values) {
  for (const ZeroBucket& b : layout_.buckets()) {
    Tensor mine = flat_view(shard_values_, b.shard_offset, b.shard_offset + b.owned.size());
    copy_from_host(flat_view(host_values, b.owned.begin, b.owned.end), mine);
  }
  refresh_16_bit_shard();
}

void ShardedParameters::gather_all() {
  if (all_gathered_) return;
  Tensor full = placement_.zeros({store_.numel()});
  gather_from_shard(shard_values_, full);
  round_to_format(full, options_.compute_format);
  track(static_cast<std::int64_t>(full.nbytes()));
  store_.rebind(0, store_.numel(), full, Tensor());
  all_gathered_ = true;
}

void ShardedParameters::release_all() {
  if (!all_gathered_) return;
  store_.unbind(0, store_.numel(), true, false);
  track(-store_.numel() * static_cast<std::int64_t>(sizeof(float)));
  all_gathered_ = false;
}

ShardedMemory ShardedParameters::resident() const {
  ShardedMemory m = ShardedGradients::resident();
  m.parameter_bytes += static_cast<std::int64_t>(shard_values_.nbytes());
  if (shard_values_16_.defined()) m.compute_copy_bytes = static_cast<std::int64_t>(shard_values_16_.nbytes());
  return m;
}

}  // namespace myriad::parallel
