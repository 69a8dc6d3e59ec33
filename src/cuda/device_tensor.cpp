// Device tensors over the context's caching allocator, and host <-> device copies (see
// device_tensor.h).
#include "myriad/cuda/device_tensor.h"

#include "myriad/cuda/check.h"
#include "myriad/cuda/device_guard.h"

namespace myriad::cuda {

namespace {

void check_device_tensor(const DeviceContext& context, const Tensor& tensor, const char* what) {
  MYRIAD_CHECK(tensor.defined(), what << ": undefined tensor");
  MYRIAD_CHECK(tensor.device() == Device::cuda(context.device()),
               what << ": tensor " << tensor.describe() << " is not on the context's device cuda:" << context.device());
  MYRIAD_CHECK(tensor.is_contiguous(), what << ": tensor " << tensor.describe() << " is not contiguous");
}

}  // namespace

Tensor device_empty(DeviceContext& context, const Shape& shape, DType dtype) {
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  CachingAllocator* allocator = &context.allocator();
  const auto stream = reinterpret_cast<StreamId>(context.stream());
  void* data = allocator->allocate(bytes, stream);
  auto storage = Storage::wrap(data, bytes, Device::cuda(context.device()), [allocator](void* ptr) {
    if (ptr != nullptr) allocator->free(ptr);
  });
  return Tensor::from_storage(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

Tensor to_device(DeviceContext& context, const Tensor& host) {
  MYRIAD_CHECK(host.defined() && host.device().is_cpu(),
               "to_device: source " << (host.defined() ? host.describe() : "undefined") << " is not a host tensor");
  const Tensor source = host.contiguous();
  Tensor result = device_empty(context, source.shape(), source.dtype());
  if (source.nbytes() > 0) {
    DeviceGuard guard(context.device());
    MYRIAD_CUDA_CHECK(cudaMemcpyAsync(result.raw_data(), source.raw_data(), source.nbytes(), cudaMemcpyHostToDevice,
                                      context.stream()));
    // Pageable host memory: the call returns once the source has been staged, but a pinned or
    // foreign buffer would still be read later, so wait for the copy before `source` may go.
    MYRIAD_CUDA_CHECK(cudaStreamSynchronize(context.stream()));
  }
  return result;
}

Tensor to_host(DeviceContext& context, const Tensor& device) {
  check_device_tensor(context, device, "to_host");
  Tensor result = Tensor::empty(device.shape(), device.dtype());
  if (device.nbytes() > 0) {
    DeviceGuard guard(context.device());
    MYRIAD_CUDA_CHECK(cudaMemcpyAsync(result.raw_data(), device.raw_data(), device.nbytes(), cudaMemcpyDeviceToHost,
                                      context.stream()));
    MYRIAD_CUDA_CHECK(cudaStreamSynchronize(context.stream()));
  }
  return result;
}

void zero_device(DeviceContext& context, const Tensor& device) {
  check_device_tensor(context, device, "zero_device");
  if (device.nbytes() == 0) return;
  DeviceGuard guard(context.device());
  MYRIAD_CUDA_CHECK(cudaMemsetAsync(device.raw_data(), 0, device.nbytes(), context.stream()));
}

}  // namespace myriad::cuda
