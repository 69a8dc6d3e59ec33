// DeviceGradientSync: block-overlapped all-reduces (ZeRO 0), bucketed reduce-scatters into the
// shard and the values' all-gather (ZeRO 1); see device_gradient_sync.h.
#include "device_gradient_sync.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "myriad/core/error.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/device_tensor.h"

namespace myriad::train {

DeviceGradientSync::DeviceGradientSync(cuda::DeviceContext& context, cuda::DeviceGpt& model, const DataParallel& host,
                                       std::unique_ptr<dist::Communicator> dp, bool overlap)
    : context_(context),
      model_(model),
      zero_stage_(host.zero_stage()),
      layout_(host.layout()),
      dp_(std::move(dp)),
      overlap_(overlap && dp_ != nullptr) {
  MYRIAD_CHECK(zero_stage_ <= 1, "training.device cuda: parallel.zero_stage " << zero_stage_
                                                                             << " is not supported (0 or 1)");
  if (zero_stage_ == 1) {
    shard_grads_ = cuda::DeviceBuffer(static_cast<std::size_t>(layout_.shard_elements()) * sizeof(float),
                                      context_.device());
  }
  if (overlap_) {
    model_.set_block_gradients_ready([this](std::int64_t, cuda::DeviceGpt::FlatRange range) { block_ready(range); });
  }
  reset();
}

const float* DeviceGradientSync::optimizer_grads() {
  return zero_stage_ == 0 ? model_.gradients().data<float>() : shard_grads_.as<float>();
}

std::int64_t DeviceGradientSync::optimizer_grad_elements() const {
  return zero_stage_ == 0 ? model_.parameter_floats() : layout_.shard_elements();
}

void DeviceGradientSync::reset() {
  launched_.assign(layout_.buckets().size(), false);
  pending_elements_.clear();
  for (const dist::ZeroBucket& b : layout_.buckets()) pending_elements_.push_back(b.size());
}

void DeviceGradientSync::begin_micro_batch(bool last) {
  reducing_ = overlap_ && last;
  reset();
}

void DeviceGradientSync::finish() {
  if (zero_stage_ == 0 && !dp_) return;
  if (zero_stage_ == 0 && !overlap_) {  // a pipeline: everything now
    pending_.push_back(dp_->all_reduce_async(model_.gradients()));
  } else if (zero_stage_ == 0) {
    // The flat ranges outside the blocks (embeddings, final norm, head), in order.
    Tensor all = model_.gradients();
    std::int64_t at = 0;
    for (const cuda::DeviceGpt::FlatRange& block : model_.block_ranges()) {
      if (block.begin > at) pending_.push_back(dp_->all_reduce_async(all.slice(0, at, block.begin)));
      at = std::max(at, block.end);
    }
    if (at < all.numel()) pending_.push_back(dp_->all_reduce_async(all.slice(0, at, all.numel())));
  } else {
    for (std::size_t b = 0; b < launched_.size(); ++b) {
      if (!launched_[b]) launch_bucket(b);
    }
  }
  wait_pending();
  reducing_ = false;
}

void DeviceGradientSync::gather_values() {
  if (zero_stage_ != 1 || !dp_) return;
  Tensor all = model_.values();
  for (const dist::ZeroBucket& b : layout_.buckets()) {
    pending_.push_back(dp_->all_gather_async(all.slice(0, b.owned.begin, b.owned.end), all.slice(0, b.begin, b.end)));
  }
  wait_pending();
}

// ZeRO 0: all-reduce the block's gradients now. ZeRO 1: count the block's elements off the
// buckets it overlaps and reduce-scatter every bucket that is complete.
void DeviceGradientSync::block_ready(cuda::DeviceGpt::FlatRange range) {
  if (!reducing_) return;
  if (zero_stage_ == 0) {
    pending_.push_back(dp_->all_reduce_async(model_.gradients().slice(0, range.begin, range.end)));
    return;
  }
  for (std::size_t b = 0; b < launched_.size(); ++b) {
    const dist::ZeroBucket& bucket = layout_.buckets()[b];
    const std::int64_t overlap = std::min(bucket.end, range.end) - std::max(bucket.begin, range.begin);
    if (overlap <= 0 || launched_[b]) continue;
    pending_elements_[b] -= overlap;
    if (pending_elements_[b] == 0) launch_bucket(b);
  }
}

// Reduce-scatters bucket b into its place in the shard (one dp rank: copies it there).
void DeviceGradientSync::launch_bucket(std::size_t b) {
  const dist::ZeroBucket& bucket = layout_.buckets()[b];
  Tensor shard = cuda::view_device_floats(context_, shard_grads_.as<float>(), {layout_.shard_elements()});
  Tensor mine = shard.slice(0, bucket.shard_offset, bucket.shard_offset + bucket.owned.size());
  Tensor whole = model_.gradients().slice(0, bucket.begin, bucket.end);
  if (dp_) {
    pending_.push_back(dp_->reduce_scatter_async(whole, mine));
  } else {
    MYRIAD_CUDA_CHECK(cudaMemcpyAsync(mine.raw_data(), whole.raw_data(), mine.nbytes(), cudaMemcpyDeviceToDevice,
                                      context_.stream()));
  }
  launched_[b] = true;
}

void DeviceGradientSync::wait_pending() {
  for (dist::WorkHandle& work : pending_) work->wait();
  pending_.clear();
}

}  // namespace myriad::train
