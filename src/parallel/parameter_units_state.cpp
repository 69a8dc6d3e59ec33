// ParameterUnits: conversions between the stage's layout and the full flat layout (checkpoints,
// layout-independent) or the owned part, and the memory accounting (see parameter_units.h).
#include "myriad/parallel/parameter_units.h"

#include <algorithm>

#include "flat_copy.h"
#include "myriad/ops/elementwise.h"

namespace myriad::parallel {

void ParameterUnits::gather_from_shard(const Tensor& shard, Tensor& full) {
  std::vector<distributed::WorkHandle> gathers;
  for (const ZeroBucket& b : layout_.buckets()) {
    Tensor mine = flat_view(shard, b.shard_offset, b.shard_offset + b.owned.size());
    Tensor whole = flat_view(full, b.begin, b.end);
    if (b.parts == 1) {
      copy_floats(mine, whole);
    } else {
      gathers.push_back(comm_of(b).all_gather_async(mine, whole));
    }
  }
  for (distributed::WorkHandle& g : gathers) g->wait();
}

void ParameterUnits::moments_to_full(const Tensor& packed, Tensor& full) {
  const bool sharded = layout_.parts() > 1;
  if (sharded && !moment_shard_.defined()) moment_shard_ = placement_.zeros({layout_.shard_elements()});
  Tensor target = sharded ? moment_shard_ : full;
  std::int64_t position = 0;
  for (const ZeroSegment& s : segments_) {
    const std::int64_t n = s.end - s.begin, at = sharded ? s.shard_position : s.begin;
    Tensor into = flat_view(target, at, at + n);
    copy_floats(flat_view(packed, position, position + n), into);
    position += n;
  }
  if (sharded) gather_from_shard(moment_shard_, full);
}

void ParameterUnits::full_values(Tensor& full) { copy_floats(store_.flat_values(), full); }

void ParameterUnits::load_values(const Tensor& host_values) {
  Tensor flat = store_.flat_values();
  copy_from_host(host_values, flat);
}

void ParameterUnits::snapshot_full(FullState& out) {
  const std::int64_t n = store_.numel();
  for (Tensor* t : {&out.values, &out.m, &out.v}) {
    if (!t->defined() || t->numel() != n) *t = Tensor::zeros({n});
  }
  // Assembled where the state lives (the gathers run there), then brought to the host.
  Tensor full = placement_.on_host() ? out.values : placement_.zeros({n});
  full_values(full);
  if (!placement_.on_host()) copy_to_host(full, out.values.data<float>());
  for (auto [packed, host] : {std::pair{&optimizer_->m(), &out.m}, std::pair{&optimizer_->v(), &out.v}}) {
    Tensor target = placement_.on_host() ? *host : full;
    if (!placement_.on_host()) zero(full);  // padding between parameters reads 0
    moments_to_full(*packed, target);
    if (!placement_.on_host()) copy_to_host(full, host->data<float>());
  }
}

void ParameterUnits::snapshot_owned(OwnedState& out) {
  const std::int64_t n = optimizer_->state_elements();  // the owned elements, packed in segment order
  for (Tensor* t : {&out.values, &out.m, &out.v}) {
    if (!t->defined() || t->numel() != n) *t = Tensor::zeros({std::max<std::int64_t>(n, 1)});
  }
  out.segments.clear();
  std::int64_t packed = 0;
  for (const ZeroSegment& s : segments_) {
    const std::int64_t count = s.end - s.begin;
    copy_to_host(owned_values(s), out.values.data<float>() + packed);
    ZeroSegment owned = s;
    owned.shard_position = packed;
    out.segments.push_back(owned);
    packed += count;
  }
  if (n > 0) {
    copy_to_host(optimizer_->m(), out.m.data<float>());
    copy_to_host(optimizer_->v(), out.v.data<float>());
  }
}

void ParameterUnits::load_full(const Tensor& values, const Tensor& m, const Tensor& v) {
  for (const Tensor* t : {&values, &m, &v}) {
    MYRIAD_CHECK(
        t->numel() == store_.numel() && t->is_contiguous(),
        "DataParallel::load_full: expected " << store_.numel() << " contiguous elements, got " << t->describe());
  }
  load_values(values);
  std::int64_t position = 0;
  for (const ZeroSegment& s : segments_) {
    const std::int64_t n = s.end - s.begin;
    Tensor m_part = flat_view(optimizer_->m(), position, position + n);
    Tensor v_part = flat_view(optimizer_->v(), position, position + n);
    copy_from_host(flat_view(m, s.begin, s.end), m_part);
    copy_from_host(flat_view(v, s.begin, s.end), v_part);
    position += n;
  }
}

ShardedMemory ParameterUnits::memory() const {
  ShardedMemory m = zero_memory_formula(store_.numel(), layout_.shard_elements(), stage());
  m.optimizer_bytes = 2 * 4 * optimizer_->state_elements();
  m.buffer_peak_bytes = buffer_peak_;
  return m;
}

ShardedMemory ParameterUnits::resident() const {
  auto bytes = [](const Tensor& t) { return t.defined() ? static_cast<std::int64_t>(t.nbytes()) : 0; };
  ShardedMemory m;
  m.parameter_bytes = store_.value_bytes();  // the flat values, or (INT8 serving) the compact ones and int8
  m.gradient_bytes = bytes(store_.flat_grads()) + bytes(shard_grads_);
  m.optimizer_bytes = bytes(optimizer_->m()) + bytes(optimizer_->v());
  m.buffer_peak_bytes = buffer_peak_;
  return m;
}

}  // namespace myriad::parallel
