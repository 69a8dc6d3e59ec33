// DataParallel: bucket launches from the unit hooks, shard bookkeeping, ZeRO-3 gathers, the
// sharded optimizer step and conversions to and from the full flat layout.
#include "myriad/parallel/data_parallel.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "myriad/distributed/scalar_reduce.h"
#include "myriad/nn/linear.h"
#include "myriad/ops/elementwise.h"
#include "myriad/optim/onebit_adam.h"

namespace myriad::parallel {

namespace {
// Stages 2/3: reductions allowed in flight before the backward waits for the oldest (bounds the
// transient gradient buffers to a few units).
constexpr std::size_t kMaxInFlight = 2;

// memcpy of n floats split over the OpenMP threads (large snapshots are bandwidth-bound).
void parallel_copy(float* destination, const float* source, std::int64_t n) {
  constexpr std::int64_t kChunk = 1 << 18;
  const std::int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (chunks > 1)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const std::int64_t begin = c * kChunk, count = std::min(kChunk, n - begin);
    std::memcpy(destination + begin, source + begin, static_cast<std::size_t>(count) * sizeof(float));
  }
}

// host[0, n) <- `source` (n contiguous floats, on the host or a backend's device).
void copy_to_host(const Tensor& source, float* host) {
  if (source.device().is_cpu()) return parallel_copy(host, source.data<float>(), source.numel());
  const Tensor copy = ops::placement_of(source, "source").to_host(source);
  parallel_copy(host, copy.data<float>(), copy.numel());
}

// `target` (contiguous, on the host or a device) <- `host` (a contiguous host view of its size).
void copy_from_host(const Tensor& host, Tensor& target) {
  if (target.device().is_cpu()) return parallel_copy(target.data<float>(), host.data<float>(), target.numel());
  copy(ops::placement_of(target, "target").from_host(host), target);
}

// dst <- src, both contiguous f32 where the state lives.
void copy_floats(const Tensor& src, Tensor& dst) {
  if (dst.device().is_cpu()) return parallel_copy(dst.data<float>(), src.data<float>(), dst.numel());
  copy(src, dst);
}
}  // namespace

DataParallel::DataParallel(nn::GptModel& model, distributed::Communicator& dp, const DataParallelOptions& options,
                           const optim::AdamWConfig& adam)
    : model_(model),
      store_(model.parameters()),
      placement_(model.parameters().placement()),
      dp_(dp),
      expert_dp_(options.expert_data_parallel ? *options.expert_data_parallel : dp),
      stage_(options.zero_stage),
      options_(options),
      layout_(model.units(), options.zero_stage >= 2 ? 1 : options.bucket_elements,
              options.zero_stage >= 1 ? dp.size() : 1, options.zero_stage >= 1 ? dp.rank() : 0,
              options.zero_stage >= 1 ? expert_dp_.size() : 1, options.zero_stage >= 1 ? expert_dp_.rank() : 0) {
  MYRIAD_CHECK(stage_ >= 0 && stage_ <= 3, "parallel.zero_stage " << stage_ << " is not one of 0, 1, 2, 3");
  MYRIAD_CHECK(!options.pipelined || stage_ <= 1,
               "parallel.zero_stage " << stage_ << " reduces gradients during the backward; with pipeline "
                                      << "parallelism use zero_stage 0 or 1");
  std::vector<parallel::ParamSpan> spans;
  for (const nn::Parameter& p : store_.all()) spans.push_back({p.offset, shape_numel(p.shape)});
  segments_ = layout_.segments(spans);
  const std::size_t units = model.units().size();
  if (stage_ >= 1) shard_grads_ = placement_.zeros({layout_.shard_elements()});
  if (stage_ == 3) {
    shard_values_ = placement_.empty({layout_.shard_elements()});
    for (const parallel::ZeroBucket& b : layout_.buckets()) {
      Tensor mine = flat_view(shard_values_, b.shard_offset, b.shard_offset + b.owned.size());
      copy_floats(flat_view(store_.flat_values(), b.owned.begin, b.owned.end), mine);
    }
    store_.drop_flat_values();
  }
  if (stage_ >= 2) store_.drop_flat_grads();
  std::vector<optim::OptimizerSegment> optimizer_segments;
  for (const parallel::ZeroSegment& s : segments_) {
    const std::int64_t n = s.end - s.begin;
    Tensor value = stage_ == 3 ? flat_view(shard_values_, s.shard_position, s.shard_position + n)
                               : flat_view(store_.flat_values(), s.begin, s.end);
    Tensor grad = stage_ == 0 ? flat_view(store_.flat_grads(), s.begin, s.end)
                              : flat_view(shard_grads_, s.shard_position, s.shard_position + n);
    optimizer_segments.push_back({value, grad, store_[s.param].kind, store_[s.param].primary, s.expert});
  }
  optimizer_ = std::make_unique<optim::AdamWOptimizer>(std::move(optimizer_segments), adam);
  unit_grads_.resize(units);
  unit_values_.resize(units);
  unit_values_16_.resize(units);
  if (gathers_16_bit()) {
    shard_values_16_ = placement_.empty({layout_.shard_elements()}, options_.compute_format);
    refresh_16_bit_shard();
  }
  value_refs_.assign(units, 0);
  value_gathers_.resize(units);
  units_left_.assign(layout_.buckets().size(), 0);
  launched_.assign(layout_.buckets().size(), 0);
  deferred_.assign(layout_.buckets().size(), 0);
  for (int unit : options.deferred_units) deferred_[static_cast<std::size_t>(layout_.bucket_of_unit(unit))] = 1;
  communicate_ = !options.pipelined;
  const GradientExchange& exchange = options.exchange;
  if (exchange.kind != GradientExchange::Kind::exact) {
    MYRIAD_CHECK(stage_ == 0 && placement_.on_host() &&
                     (options.expert_parallel == nullptr || options.expert_parallel->size() == 1),
                 "compressed gradient exchange needs zero_stage 0, host parameters and ep 1");
    if (exchange.kind == GradientExchange::Kind::local) {
      local_sgd_ = std::make_unique<LocalSgd>(dp_, store_.flat_values(), exchange.local);
    } else if (exchange.kind == GradientExchange::Kind::compressed) {
      compressed_ =
          std::make_unique<distributed::CompressedSum>(dp_, store_.flat_grads().numel(), exchange.compression);
    } else {
      MYRIAD_CHECK(exchange.freeze_step >= 1, "1-bit Adam: freeze_step " << exchange.freeze_step << " must be >= 1");
      compressed_ = std::make_unique<distributed::CompressedSum>(
          dp_, optimizer_->m().numel(), distributed::CompressionSpec{distributed::Compression::sign});
    }
  }
  model_.set_hooks(this);
}

DataParallel::~DataParallel() {
  model_.set_hooks(nullptr);
  for (Pending& p : pending_) {
    try {
      p.work->wait();
    } catch (...) {  // destructor: the error was or will be reported by the failing rank
    }
  }
}

distributed::Communicator& DataParallel::comm_of(const parallel::ZeroBucket& bucket) const {
  return bucket.expert ? expert_dp_ : dp_;
}

Tensor DataParallel::flat_view(const Tensor& buffer, std::int64_t begin, std::int64_t end) const {
  return Tensor::from_storage(buffer.storage(), {end - begin}, {1}, buffer.offset() + begin, DType::f32);
}

void DataParallel::track(std::int64_t delta_bytes) {
  buffer_bytes_ += delta_bytes;
  buffer_peak_ = std::max(buffer_peak_, buffer_bytes_);
}

void DataParallel::reset_units_left() {
  for (std::size_t b = 0; b < units_left_.size(); ++b) {
    const parallel::ZeroBucket& bucket = layout_.buckets()[b];
    units_left_[b] = bucket.last_unit - bucket.first_unit + 1;
  }
}

double DataParallel::sum_over_model_parallel(double value) const {
  for (distributed::Communicator* group : options_.model_parallel) {
    if (group->size() > 1) value = distributed::sum_over_ranks(*group, value);
  }
  return value;
}

void DataParallel::zero_grads() {
  if (stage_ <= 1) store_.zero_grads();
  if (shard_grads_.defined()) zero(shard_grads_);
  if (options_.pipelined) {  // the step's count of final gradients starts here, not per micro-batch
    reset_units_left();
    std::fill(launched_.begin(), launched_.end(), 0);
    buckets_overlapped_ = 0;
    communicate_ = false;
  }
}

bool DataParallel::exchanges_exactly() const {
  switch (options_.exchange.kind) {
    case GradientExchange::Kind::exact:
      return true;
    case GradientExchange::Kind::compressed:
    case GradientExchange::Kind::local:
      return false;
    case GradientExchange::Kind::onebit_adam:
      return optimizer_->steps_taken() < options_.exchange.freeze_step;
  }
  return true;
}

void DataParallel::begin_pipelined_backward(bool final_for_chunk) {
  if (options_.pipelined) communicate_ = final_for_chunk && exchanges_exactly();
}

void DataParallel::begin_micro_batch(bool last_of_step) {
  if (options_.pipelined) return;  // per chunk: begin_pipelined_backward
  communicate_ = (stage_ >= 2 || last_of_step) && exchanges_exactly();
  reset_units_left();
}

void DataParallel::grads_ready(int unit) {
  if (!communicate_) return;  // stages 0/1, not the last micro-batch (or pipeline): keep accumulating locally
  const int bucket = layout_.bucket_of_unit(unit);
  const auto b = static_cast<std::size_t>(bucket);
  if (--units_left_[b] != 0 || (options_.pipelined && deferred_[b])) return;
  launch_bucket(bucket);
  if (options_.pipelined) ++buckets_overlapped_;
}

void DataParallel::launch_bucket(int bucket) {
  const parallel::ZeroBucket& b = layout_.buckets()[static_cast<std::size_t>(bucket)];
  launched_[static_cast<std::size_t>(bucket)] = 1;
  Pending p;
  p.bucket = bucket;
  if (stage_ == 0) {
    p.work = comm_of(b).all_reduce_async(flat_view(store_.flat_grads(), b.begin, b.end));
  } else if (stage_ == 1) {
    p.work = comm_of(b).reduce_scatter_async(flat_view(store_.flat_grads(), b.begin, b.end),
                                             flat_view(shard_grads_, b.shard_offset, b.shard_offset + b.owned.size()));
  } else {
    const auto u = static_cast<std::size_t>(b.first_unit);  // one unit per bucket at stages 2/3
    const nn::ParamUnit& unit = model_.units()[u];
    MYRIAD_CHECK(unit_grads_[u].defined(), "DataParallel: unit '" << unit.name << "' reported final gradients "
                                                                  << "without a gradient buffer");
    p.unit_grads = unit_grads_[u];
    unit_grads_[u] = Tensor();
    store_.unbind(unit.begin, unit.end, false, true);
    p.reduced = placement_.empty({b.owned.size()});
    track(static_cast<std::int64_t>(p.reduced.nbytes()));
    p.work = comm_of(b).reduce_scatter_async(p.unit_grads, p.reduced);
  }
  pending_.push_back(std::move(p));
  if (stage_ >= 2) retire_completed(kMaxInFlight);
}

void DataParallel::retire(Pending& p) {
  p.work->wait();
  if (!p.reduced.defined()) return;
  const parallel::ZeroBucket& b = layout_.buckets()[static_cast<std::size_t>(p.bucket)];
  Tensor shard = flat_view(shard_grads_, b.shard_offset, b.shard_offset + b.owned.size());
  nn::add_into(shard, p.reduced);
  track(-static_cast<std::int64_t>(p.reduced.nbytes() + p.unit_grads.nbytes()));
  p.reduced = Tensor();
  p.unit_grads = Tensor();
}

void DataParallel::retire_completed(std::size_t keep_in_flight) {
  while (!pending_.empty() && (pending_.size() > keep_in_flight || pending_.front().work->completed())) {
    retire(pending_.front());
    pending_.pop_front();
  }
}

void DataParallel::reduce_gradients() {
  MYRIAD_CHECK(options_.pipelined, "DataParallel::reduce_gradients needs pipelined");
  for (std::size_t b = 0; b < layout_.buckets().size(); ++b) {
    if (!launched_[b]) launch_bucket(static_cast<int>(b));
  }
  retire_completed(0);
}

void DataParallel::finish_step() {
  if (!options_.pipelined) {
    finish_backward();
  } else if (exchanges_exactly()) {
    reduce_gradients();
  }
  if (options_.exchange.kind == GradientExchange::Kind::compressed) {
    Tensor grads = store_.flat_grads();
    compressed_->sum(grads);
  }
  sum_tp_partial_grads();
}

void DataParallel::sum_tp_partial_grads() {
  distributed::Communicator* tp = options_.tensor_parallel;
  if (tp == nullptr || tp->size() == 1) return;
  // Every tp rank holds the same segments of these parameters (dp shards them, not tp).
  std::vector<distributed::WorkHandle> sums;
  const std::vector<optim::OptimizerSegment>& segments = optimizer_->segments();
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    if (store_[segments_[i].param].tp_partial) sums.push_back(tp->all_reduce_async(segments[i].grad));
  }
  for (distributed::WorkHandle& w : sums) w->wait();
}

void DataParallel::finish_backward() {
  retire_completed(0);
  // Stage 3: a prefetched unit that the pass never acquired is dropped here.
  for (std::size_t u = 0; u < unit_values_.size(); ++u) {
    if (value_refs_[u] != 0 || !unit_values_[u].defined() || all_gathered_) continue;
    if (value_gathers_[u]) value_gathers_[u]->wait();
    value_gathers_[u].reset();
    free_values(static_cast<int>(u));
  }
}

void DataParallel::free_values(int unit) {
  const auto u = static_cast<std::size_t>(unit);
  store_.unbind(model_.units()[u].begin, model_.units()[u].end, true, false);
  track(-static_cast<std::int64_t>(unit_values_[u].nbytes()));
  unit_values_[u] = Tensor();
  if (unit_values_16_[u].defined()) {  // a prefetch dropped before its values were widened
    track(-static_cast<std::int64_t>(unit_values_16_[u].nbytes()));
    unit_values_16_[u] = Tensor();
  }
}

void DataParallel::acquire(int unit, nn::Pass pass) {
  const auto u = static_cast<std::size_t>(unit);
  const nn::ParamUnit& range = model_.units()[u];
  if (stage_ >= 2 && pass != nn::Pass::forward && !unit_grads_[u].defined()) {
    unit_grads_[u] = placement_.zeros({range.size()});
    track(static_cast<std::int64_t>(unit_grads_[u].nbytes()));
    store_.rebind(range.begin, range.end, Tensor(), unit_grads_[u]);
  }
  if (stage_ == 3 && pass != nn::Pass::backward_grads && !all_gathered_) {
    if (value_refs_[u]++ == 0) ensure_values(unit);
    const int next = pass == nn::Pass::forward ? unit + 1 : unit - 1;
    const bool next_reads_values = next != 0 || model_.config().tie_embeddings;
    if (next >= 0 && next < static_cast<int>(model_.units().size()) && next_reads_values) prefetch_values(next);
  }
  if (stage_ >= 2) retire_completed(kMaxInFlight);
}

void DataParallel::release(int unit, nn::Pass pass) {
  if (stage_ != 3 || pass == nn::Pass::backward_grads || all_gathered_) return;
  const auto u = static_cast<std::size_t>(unit);
  if (--value_refs_[u] == 0) free_values(unit);
}

void DataParallel::refresh_16_bit_shard() {
  if (!gathers_16_bit() || shard_values_.numel() == 0) return;
  copy(shard_values_, shard_values_16_);  // rounds to nearest even
}

void DataParallel::prefetch_values(int unit) {
  const auto u = static_cast<std::size_t>(unit);
  if (unit_values_[u].defined()) return;
  const nn::ParamUnit& range = model_.units()[u];
  const parallel::ZeroBucket& b = layout_.buckets()[static_cast<std::size_t>(layout_.bucket_of_unit(unit))];
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

void DataParallel::ensure_values(int unit) {
  const auto u = static_cast<std::size_t>(unit);
  prefetch_values(unit);  // no-op when already gathered or in flight
  if (value_gathers_[u]) {
    value_gathers_[u]->wait();
    value_gathers_[u].reset();
    if (unit_values_16_[u].defined()) {
      copy(unit_values_16_[u], unit_values_[u]);  // widening: exact
      track(-static_cast<std::int64_t>(unit_values_16_[u].nbytes()));
      unit_values_16_[u] = Tensor();
    } else {
      round_to_format(unit_values_[u], options_.compute_format);
    }
  }
}

void DataParallel::consolidate_replicas() {
  if (local_sgd_) local_sgd_->consolidate(optimizer_->m(), optimizer_->v());
}

optim::OptimizerStepStats DataParallel::optimizer_step(float lr, float unscale) {
  if (local_sgd_) {
    // Each replica's own gradients (stage 0); every replica skips when one norm is not finite.
    double sum_squares = sum_over_model_parallel(optimizer_->grad_sum_squares());
    if (distributed::sum_over_ranks(dp_, std::isfinite(sum_squares) ? 0.0 : 1.0) > 0.0) {
      sum_squares = std::numeric_limits<double>::quiet_NaN();
    }
    optim::OptimizerStepStats stats = optimizer_->step(lr, sum_squares, unscale);
    if (!stats.skipped) local_sgd_->after_inner_step(optimizer_->steps_taken());
    return stats;
  }
  if (!exchanges_exactly() && options_.exchange.kind == GradientExchange::Kind::onebit_adam) {
    // Local gradients: P g_r estimates the global gradient; its squared norm averaged over ranks.
    const int replicas = dp_.size();
    const double sum_squares =
        sum_over_model_parallel(distributed::sum_over_ranks(dp_, optimizer_->grad_sum_squares()) * replicas);
    const optim::OneBitAdamArgs args{lr, sum_squares, unscale, replicas, options_.exchange.freeze_step};
    return optim::onebit_adam_step(*optimizer_, args, [this](Tensor& momentum) { compressed_->sum(momentum); });
  }
  // Sharded (stage >= 1): every element is owned once over the dp group (dense shards split it;
  // expert shards split each ep rank's experts over its expert-data group). Stage 0: dense
  // gradients are complete here, expert ones cover this rank's experts only: summed over ep.
  double sum_squares = optimizer_->grad_sum_squares();
  if (stage_ >= 1) {
    sum_squares = distributed::sum_over_ranks(dp_, sum_squares);
  } else if (options_.expert_parallel && options_.expert_parallel->size() > 1) {
    sum_squares = optimizer_->grad_sum_squares(false) +
                  distributed::sum_over_ranks(*options_.expert_parallel, optimizer_->grad_sum_squares(true));
  }
  sum_squares = sum_over_model_parallel(sum_squares);
  optim::OptimizerStepStats stats = optimizer_->step(lr, sum_squares, unscale);
  if (!stats.skipped) refresh_16_bit_shard();
  if (!stats.skipped && (stage_ == 1 || stage_ == 2)) {
    std::vector<distributed::WorkHandle> gathers;
    for (const parallel::ZeroBucket& b : layout_.buckets()) {
      gathers.push_back(comm_of(b).all_gather_async(flat_view(store_.flat_values(), b.owned.begin, b.owned.end),
                                                    flat_view(store_.flat_values(), b.begin, b.end)));
    }
    for (distributed::WorkHandle& g : gathers) g->wait();
  }
  return stats;
}

void DataParallel::gather_from_shard(const Tensor& shard, Tensor& full) {
  std::vector<distributed::WorkHandle> gathers;
  for (const parallel::ZeroBucket& b : layout_.buckets()) {
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

void DataParallel::moments_to_full(const Tensor& packed, Tensor& full) {
  const bool sharded = layout_.parts() > 1;
  if (sharded && !moment_shard_.defined()) moment_shard_ = placement_.zeros({layout_.shard_elements()});
  Tensor target = sharded ? moment_shard_ : full;
  std::int64_t position = 0;
  for (const parallel::ZeroSegment& s : segments_) {
    const std::int64_t n = s.end - s.begin, at = sharded ? s.shard_position : s.begin;
    Tensor into = flat_view(target, at, at + n);
    copy_floats(flat_view(packed, position, position + n), into);
    position += n;
  }
  if (sharded) gather_from_shard(moment_shard_, full);
}

void DataParallel::snapshot_full(FullState& out) {
  const std::int64_t n = store_.numel();
  for (Tensor* t : {&out.values, &out.m, &out.v}) {
    if (!t->defined() || t->numel() != n) *t = Tensor::zeros({n});
  }
  // Assembled where the state lives (the gathers run there), then brought to the host.
  Tensor full = placement_.on_host() ? out.values : placement_.zeros({n});
  if (stage_ == 3) {
    gather_from_shard(shard_values_, full);
  } else {
    copy_floats(store_.flat_values(), full);
  }
  if (!placement_.on_host()) copy_to_host(full, out.values.data<float>());
  for (auto [packed, host] : {std::pair{&optimizer_->m(), &out.m}, std::pair{&optimizer_->v(), &out.v}}) {
    Tensor target = placement_.on_host() ? *host : full;
    if (!placement_.on_host()) zero(full);  // padding between parameters reads 0
    moments_to_full(*packed, target);
    if (!placement_.on_host()) copy_to_host(full, host->data<float>());
  }
}

void DataParallel::snapshot_owned(OwnedState& out) {
  const std::int64_t n = optimizer_->state_elements();  // the owned elements, packed in segment order
  for (Tensor* t : {&out.values, &out.m, &out.v}) {
    if (!t->defined() || t->numel() != n) *t = Tensor::zeros({std::max<std::int64_t>(n, 1)});
  }
  out.segments.clear();
  std::int64_t packed = 0;
  for (const parallel::ZeroSegment& s : segments_) {
    const std::int64_t count = s.end - s.begin;
    const Tensor source = stage_ == 3 ? flat_view(shard_values_, s.shard_position, s.shard_position + count)
                                      : flat_view(store_.flat_values(), s.begin, s.end);
    copy_to_host(source, out.values.data<float>() + packed);
    parallel::ZeroSegment owned = s;
    owned.shard_position = packed;
    out.segments.push_back(owned);
    packed += count;
  }
  if (n > 0) {
    copy_to_host(optimizer_->m(), out.m.data<float>());
    copy_to_host(optimizer_->v(), out.v.data<float>());
  }
  if (local_sgd_) {  // the outer momentum, packed like the values
    if (!out.outer_momentum.defined() || out.outer_momentum.numel() != out.values.numel()) {
      out.outer_momentum = Tensor::zeros(out.values.shape());
    }
    for (const parallel::ZeroSegment& s : out.segments) {
      copy_to_host(flat_view(local_sgd_->outer_momentum(), s.begin, s.end),
                   out.outer_momentum.data<float>() + s.shard_position);
    }
  }
}

void DataParallel::load_full(const Tensor& values, const Tensor& m, const Tensor& v) {
  for (const Tensor* t : {&values, &m, &v}) {
    MYRIAD_CHECK(
        t->numel() == store_.numel() && t->is_contiguous(),
        "DataParallel::load_full: expected " << store_.numel() << " contiguous elements, got " << t->describe());
  }
  if (stage_ == 3) {
    for (const parallel::ZeroBucket& b : layout_.buckets()) {
      Tensor mine = flat_view(shard_values_, b.shard_offset, b.shard_offset + b.owned.size());
      copy_from_host(flat_view(values, b.owned.begin, b.owned.end), mine);
    }
  } else {
    Tensor flat = store_.flat_values();
    copy_from_host(values, flat);
  }
  refresh_16_bit_shard();
  if (local_sgd_) local_sgd_->reset_anchor();
  std::int64_t position = 0;
  for (const parallel::ZeroSegment& s : segments_) {
    const std::int64_t n = s.end - s.begin;
    Tensor m_part = flat_view(optimizer_->m(), position, position + n);
    Tensor v_part = flat_view(optimizer_->v(), position, position + n);
    copy_from_host(flat_view(m, s.begin, s.end), m_part);
    copy_from_host(flat_view(v, s.begin, s.end), v_part);
    position += n;
  }
}

void DataParallel::gather_all() {
  if (stage_ != 3 || all_gathered_) return;
  Tensor full = placement_.zeros({store_.numel()});
  gather_from_shard(shard_values_, full);
  round_to_format(full, options_.compute_format);
  track(static_cast<std::int64_t>(full.nbytes()));
  store_.rebind(0, store_.numel(), full, Tensor());
  all_gathered_ = true;
}

void DataParallel::release_all() {
  if (!all_gathered_) return;
  store_.unbind(0, store_.numel(), true, false);
  track(-store_.numel() * static_cast<std::int64_t>(sizeof(float)));
  all_gathered_ = false;
}

ShardedMemory DataParallel::formula(std::int64_t psi, std::int64_t shard, int stage) {
  ShardedMemory m;
  constexpr std::int64_t f32 = 4;
  m.parameter_bytes = f32 * (stage == 3 ? shard : psi);
  m.gradient_bytes = f32 * (stage == 0 ? psi : stage == 1 ? psi + shard : shard);
  m.optimizer_bytes = 2 * f32 * (stage == 0 ? psi : shard);
  return m;
}

ShardedMemory DataParallel::memory() const {
  ShardedMemory m = formula(store_.numel(), layout_.shard_elements(), stage_);
  m.optimizer_bytes = 2 * 4 * optimizer_->state_elements();
  m.buffer_peak_bytes = buffer_peak_;
  return m;
}

ShardedMemory DataParallel::resident() const {
  auto bytes = [](const Tensor& t) { return t.defined() ? static_cast<std::int64_t>(t.nbytes()) : 0; };
  ShardedMemory m;
  m.parameter_bytes = bytes(store_.flat_values()) + bytes(shard_values_);
  m.compute_copy_bytes = bytes(shard_values_16_);
  m.gradient_bytes = bytes(store_.flat_grads()) + bytes(shard_grads_);
  m.optimizer_bytes = bytes(optimizer_->m()) + bytes(optimizer_->v());
  m.buffer_peak_bytes = buffer_peak_;
  return m;
}

}  // namespace myriad::parallel
