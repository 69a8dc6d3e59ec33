// DeviceShardedValues: per-unit all-gathers of the ZeRO-3 value shard with one-unit prefetch;
// see device_sharded_values.h.
#include "device_sharded_values.h"

#include <cuda_runtime_api.h>

#include <algorithm>

#include "myriad/core/error.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/device_tensor.h"
#include "myriad/cuda/kernels.h"

namespace myriad::train {

DeviceShardedValues::DeviceShardedValues(cuda::DeviceContext& context, cuda::DeviceGpt& model,
                                         const dist::ZeroLayout& layout, dist::Communicator* dp, DType operands)
    : context_(context),
      layout_(layout),
      dp_(dp),
      operands_(operands),
      shard_(static_cast<std::size_t>(std::max<std::int64_t>(layout.shard_elements(), 1)) * sizeof(float),
             context.device()),
      gathered_(model.units().size()),
      rounded_(model.units().size()),
      gathers_(model.units().size()),
      refs_(model.units().size(), 0) {
  for (std::size_t u = 0; u < model.units().size(); ++u) {
    const dist::ZeroBucket& b = layout_.buckets()[static_cast<std::size_t>(layout_.bucket_of_unit(static_cast<int>(u)))];
    MYRIAD_CHECK(b.first_unit == b.last_unit && b.begin == model.units()[u].begin && b.end == model.units()[u].end,
                 "DeviceShardedValues: unit '" << model.units()[u].name << "' is not a bucket of its own");
  }
  model.set_unit_value_store(this);
}

void DeviceShardedValues::acquire(int unit, bool forward) {
  const auto u = static_cast<std::size_t>(unit);
  MYRIAD_CHECK(u < refs_.size(), "DeviceShardedValues: unit " << unit << " of " << refs_.size());
  if (refs_[u]++ == 0) {
    prefetch(unit);
    if (gathers_[u]) {
      gathers_[u]->wait();
      gathers_[u].reset();
    }
    if (operands_ != DType::f32) round(unit);
  }
  // The next unit the pass reads: forward in unit order; backward in reverse, where the
  // embeddings' unit (0) reads no values (a tied head acquires it with the head).
  const int next = forward ? unit + 1 : unit - 1;
  if (next >= (forward ? 0 : 1) && next < static_cast<int>(refs_.size())) prefetch(next);
}

void DeviceShardedValues::release(int unit) {
  const auto u = static_cast<std::size_t>(unit);
  MYRIAD_CHECK(u < refs_.size() && refs_[u] > 0,
               "DeviceShardedValues: unit " << unit << " released without an acquisition");
  if (--refs_[u] == 0) drop(unit);
}

float* DeviceShardedValues::unit_values(int unit) {
  const auto u = static_cast<std::size_t>(unit);
  MYRIAD_CHECK(u < refs_.size() && refs_[u] > 0 && !gathers_[u],
               "DeviceShardedValues: unit " << unit << " read without an acquisition");
  return gathered_[u].data<float>();
}

const std::uint16_t* DeviceShardedValues::unit_values_h(int unit) {
  const auto u = static_cast<std::size_t>(unit);
  MYRIAD_CHECK(u < refs_.size() && refs_[u] > 0 && rounded_[u].defined(),
               "DeviceShardedValues: 16-bit values of unit " << unit << " read without an acquisition (operands "
                                                             << dtype_name(operands_) << ")");
  return static_cast<const std::uint16_t*>(rounded_[u].raw_data());
}

// The gathered unit rounded to the 16-bit operand format, on the compute stream.
void DeviceShardedValues::round(int unit) {
  const auto u = static_cast<std::size_t>(unit);
  const float* values = gathered_[u].data<float>();
  const std::int64_t n = gathered_[u].numel();
  rounded_[u] = cuda::device_empty(context_, {n}, operands_);
  if (operands_ == DType::f16) {
    cuda::convert_f32_to_f16(values, reinterpret_cast<__half*>(rounded_[u].raw_data()), n, context_.stream());
  } else {
    cuda::convert_f32_to_bf16(values, reinterpret_cast<__nv_bfloat16*>(rounded_[u].raw_data()), n, context_.stream());
  }
  bytes_ += rounded_[u].nbytes();
  peak_bytes_ = std::max(peak_bytes_, bytes_);
}

void DeviceShardedValues::drop_prefetched() {
  for (std::size_t u = 0; u < refs_.size(); ++u) {
    if (refs_[u] == 0 && gathered_[u].defined()) drop(static_cast<int>(u));
  }
}

// Starts gathering `unit` unless it is gathered or in flight (one replica: a copy on the stream).
void DeviceShardedValues::prefetch(int unit) {
  const auto u = static_cast<std::size_t>(unit);
  if (gathered_[u].defined()) return;
  const dist::ZeroBucket& b = layout_.buckets()[static_cast<std::size_t>(layout_.bucket_of_unit(unit))];
  gathered_[u] = cuda::device_empty(context_, {b.size()});
  bytes_ += gathered_[u].nbytes();
  peak_bytes_ = std::max(peak_bytes_, bytes_);
  Tensor shard = cuda::view_device_floats(context_, shard_.as<float>(), {layout_.shard_elements()});
  Tensor mine = shard.slice(0, b.shard_offset, b.shard_offset + b.owned.size());
  if (dp_) {
    gathers_[u] = dp_->all_gather_async(mine, gathered_[u]);
  } else {
    MYRIAD_CUDA_CHECK(cudaMemcpyAsync(gathered_[u].raw_data(), mine.raw_data(), mine.nbytes(),
                                      cudaMemcpyDeviceToDevice, context_.stream()));
  }
}

void DeviceShardedValues::drop(int unit) {
  const auto u = static_cast<std::size_t>(unit);
  if (gathers_[u]) {
    gathers_[u]->wait();
    gathers_[u].reset();
  }
  bytes_ -= gathered_[u].nbytes() + (rounded_[u].defined() ? rounded_[u].nbytes() : 0);
  gathered_[u] = Tensor();
  rounded_[u] = Tensor();
}

}  // namespace myriad::train
