// Device tensors: myriad::Tensor views over memory from a DeviceContext's caching allocator, and
// the host <-> device copies between them.
//
// Invariants: a device tensor's Storage reports Device::cuda(context.device()) and returns its
// block to the context's allocator when the last view goes away, so every device tensor must be
// gone before its DeviceContext is destroyed. Memory is allocated for the context's stream (the
// caching allocator reuses a block only on the stream it was made for). Copies are queued on the
// context's stream: to_device returns once the host data has been read (the host tensor may be
// changed afterwards), to_host returns once the data is on the host.
#pragma once

#include "myriad/core/tensor.h"
#include "myriad/cuda/device_context.h"

namespace myriad::cuda {

// Uninitialised contiguous device tensor.
Tensor device_empty(DeviceContext& context, const Shape& shape, DType dtype = DType::f32);
// A contiguous device copy of a host tensor (any strides; same dtype).
Tensor to_device(DeviceContext& context, const Tensor& host);
// A contiguous host copy of a device tensor (contiguous), after the stream's earlier work.
Tensor to_host(DeviceContext& context, const Tensor& device);
// Fills a device tensor (contiguous) with zero bytes on the context's stream.
void zero_device(DeviceContext& context, const Tensor& device);

// A contiguous f32 device tensor of `shape` viewing memory it does not own (a DeviceBuffer's, a
// slice of one): no allocation, no copy; the memory's owner must outlive every view. For handing
// device buffers to interfaces that take tensors (communicators, the pipeline executor).
inline Tensor view_device_floats(const DeviceContext& context, float* data, const Shape& shape) {
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * sizeof(float);
  auto storage = Storage::wrap(data, bytes, Device::cuda(context.device()), [](void*) {});
  return Tensor::from_storage(std::move(storage), shape, contiguous_strides(shape), 0, DType::f32);
}

}  // namespace myriad::cuda
