// DeviceGradientSync: bucketed all-reduces (ZeRO 0), reduce-scatters into the shard (ZeRO 1, and
// per micro-batch from transient unit buffers at ZeRO 2) and the values' all-gather; see
// device_gradient_sync.h.
#include "device_gradient_sync.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "myriad/core/error.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/device_tensor.h"
#include "myriad/cuda/kernels.h"

namespace myriad::train {

DeviceGradientSync::DeviceGradientSync(cuda::DeviceContext& context, cuda::DeviceGpt& model, const DataParallel& host,
                                       std::unique_ptr<dist::Communicator> dp, bool overlap)
    : context_(context),
      model_(model),
      zero_stage_(host.zero_stage()),
      layout_(host.layout()),
      dp_(std::move(dp)),
      overlap_(overlap) {
  MYRIAD_CHECK(zero_stage_ >= 0 && zero_stage_ <= 3, "training.device cuda: parallel.zero_stage " << zero_stage_
                                                                                             << " is not 0, 1, 2 or 3");
  MYRIAD_CHECK(zero_stage_ < 2 || overlap_, "training.device cuda: parallel.zero_stage >= 2 reduces during the "
                                                << "backward, which a pipeline does not (use zero_stage 0 or 1)");
  MYRIAD_CHECK(layout_.total_elements() == model_.parameter_floats(),
               "DeviceGradientSync: the host layout has " << layout_.total_elements() << " elements, the model "
                                                          << model_.parameter_floats());
  if (zero_stage_ >= 1) {
    shard_grads_ = cuda::DeviceBuffer(static_cast<std::size_t>(layout_.shard_elements()) * sizeof(float),
                                      context_.device());
  }
  if (zero_stage_ >= 2) {
    for (const dist::ZeroBucket& b : layout_.buckets()) {
      MYRIAD_CHECK(b.first_unit == b.last_unit, "DeviceGradientSync: ZeRO 2 needs one unit per bucket");
    }
    unit_grads_.resize(model_.units().size());
    model_.set_unit_gradient_store(this);
  }
  if (overlap_) model_.set_unit_gradients_ready([this](int unit) { unit_ready(unit); });
  reset();
}

const float* DeviceGradientSync::optimizer_grads() {
  return zero_stage_ == 0 ? model_.gradients().data<float>() : shard_grads_.as<float>();
}

std::int64_t DeviceGradientSync::optimizer_grad_elements() const {
  return zero_stage_ == 0 ? model_.parameter_floats() : layout_.shard_elements();
}

void DeviceGradientSync::reset() {
  micro_batches_ = 0;
  reducing_ = false;
  clear_buckets();
}

void DeviceGradientSync::begin_micro_batch(bool last) {
  if (zero_stage_ >= 2) launch_remaining();  // a unit the backward never reported final (none expected)
  reducing_ = overlap_ && (last || zero_stage_ >= 2);
  accumulate_ = micro_batches_ > 0;
  ++micro_batches_;
  clear_buckets();
}

void DeviceGradientSync::clear_buckets() {
  launched_.assign(layout_.buckets().size(), false);
  units_left_.clear();
  for (const dist::ZeroBucket& b : layout_.buckets()) units_left_.push_back(b.last_unit - b.first_unit + 1);
}

void DeviceGradientSync::finish() {
  if (zero_stage_ == 0 && !dp_) return;
  if (zero_stage_ == 0 && !overlap_) {  // a pipeline: everything at once
    pending_.push_back({dp_->all_reduce_async(model_.gradients()), 0, Tensor()});
  } else {
    launch_remaining();
  }
  retire_completed(0);
  reducing_ = false;
}

void DeviceGradientSync::gather_values() {
  if (zero_stage_ == 0 || zero_stage_ == 3 || !dp_) return;  // ZeRO 3: the values stay sharded
  Tensor all = model_.values();
  for (const dist::ZeroBucket& b : layout_.buckets()) {
    pending_.push_back(
        {dp_->all_gather_async(all.slice(0, b.owned.begin, b.owned.end), all.slice(0, b.begin, b.end)), 0, Tensor()});
  }
  retire_completed(0);
}

float* DeviceGradientSync::unit_gradients(int unit) {
  MYRIAD_CHECK(zero_stage_ >= 2 && unit >= 0 && unit < static_cast<int>(unit_grads_.size()),
               "DeviceGradientSync: gradient storage for unit " << unit << " requested at ZeRO " << zero_stage_);
  const auto u = static_cast<std::size_t>(unit);
  if (!unit_grads_[u].defined()) {
    const nn::ParamUnit& range = model_.units()[u];
    MYRIAD_CHECK(!launched_[static_cast<std::size_t>(layout_.bucket_of_unit(unit))],
                 "DeviceGradientSync: unit '" << range.name << "' written after its gradients were reported final");
    retire_completed(kMaxInFlight);
    unit_grads_[u] = cuda::device_empty(context_, {range.size()});
    MYRIAD_CUDA_CHECK(cudaMemsetAsync(unit_grads_[u].raw_data(), 0, unit_grads_[u].nbytes(), context_.stream()));
    unit_bytes_ += unit_grads_[u].nbytes();
    unit_bytes_peak_ = std::max(unit_bytes_peak_, unit_bytes_);
  }
  return unit_grads_[u].data<float>();
}

// Counts the unit off its bucket; the bucket's reduction starts once all its units are final.
void DeviceGradientSync::unit_ready(int unit) {
  if (!reducing_) return;
  const auto b = static_cast<std::size_t>(layout_.bucket_of_unit(unit));
  if (!launched_[b] && --units_left_[b] == 0) launch_bucket(b);
}

void DeviceGradientSync::launch_remaining() {
  for (std::size_t b = 0; b < launched_.size(); ++b) {
    const auto first_unit = static_cast<std::size_t>(layout_.buckets()[b].first_unit);
    const bool has_gradients = zero_stage_ < 2 || unit_grads_[first_unit].defined();
    if (!launched_[b] && has_gradients) launch_bucket(b);
  }
}

// This rank's piece of the shard for `bucket` (a device view).
Tensor DeviceGradientSync::shard_piece(const dist::ZeroBucket& bucket) {
  Tensor shard = cuda::view_device_floats(context_, shard_grads_.as<float>(), {layout_.shard_elements()});
  return shard.slice(0, bucket.shard_offset, bucket.shard_offset + bucket.owned.size());
}

// ZeRO 0: all-reduces bucket b. ZeRO 1: reduce-scatters it into its place in the shard (one dp
// rank: copies). ZeRO 2/3: the same from the unit's buffer, the shard first added into this rank's
// chunk when it already holds earlier micro-batches.
void DeviceGradientSync::launch_bucket(std::size_t b) {
  const dist::ZeroBucket& bucket = layout_.buckets()[b];
  launched_[b] = true;
  if (zero_stage_ == 0) {
    if (dp_) {
      pending_.push_back({dp_->all_reduce_async(model_.gradients().slice(0, bucket.begin, bucket.end)), b, Tensor()});
    }
    return;
  }
  Tensor mine = shard_piece(bucket);
  Tensor whole;
  if (zero_stage_ == 1) {
    whole = model_.gradients().slice(0, bucket.begin, bucket.end);
  } else {
    const auto u = static_cast<std::size_t>(bucket.first_unit);
    whole = std::move(unit_grads_[u]);
    unit_grads_[u] = Tensor();
    Tensor own = whole.slice(0, bucket.owned.begin - bucket.begin, bucket.owned.end - bucket.begin);
    if (accumulate_) {
      retire_bucket(b);  // the previous micro-batch's sum must have landed in `mine`
      cuda::add_f32(own.data<float>(), mine.data<float>(), own.data<float>(), own.numel(), context_.stream());
    }
  }
  if (dp_) {
    pending_.push_back({dp_->reduce_scatter_async(whole, mine), b, zero_stage_ >= 2 ? whole : Tensor()});
  } else {
    MYRIAD_CUDA_CHECK(cudaMemcpyAsync(mine.raw_data(), whole.raw_data(), mine.nbytes(), cudaMemcpyDeviceToDevice,
                                      context_.stream()));
    // A unit buffer freed here is reused only by later work on the same stream.
    if (zero_stage_ >= 2) unit_bytes_ -= whole.nbytes();
  }
  if (zero_stage_ >= 2) retire_completed(kMaxInFlight);
}

// Waits (oldest first) until no reduction of `bucket` is in flight.
void DeviceGradientSync::retire_bucket(std::size_t bucket) {
  std::size_t last = pending_.size();
  for (std::size_t i = 0; i < pending_.size(); ++i) {
    if (pending_[i].bucket == bucket) last = i;
  }
  if (last < pending_.size()) retire_completed(pending_.size() - last - 1);
}

// Waits for the oldest reductions until at most `keep_in_flight` remain (and for any that have
// completed), dropping their unit buffers.
void DeviceGradientSync::retire_completed(std::size_t keep_in_flight) {
  while (!pending_.empty() && (pending_.size() > keep_in_flight || pending_.front().work->completed())) {
    Pending& p = pending_.front();
    p.work->wait();
    if (p.unit_grads.defined()) unit_bytes_ -= p.unit_grads.nbytes();
    pending_.pop_front();
  }
}

}  // namespace myriad::train
