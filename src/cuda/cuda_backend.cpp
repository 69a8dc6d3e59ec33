// CudaBackend: its tensors (memory from the context's caching allocator, named by their Storage)
// and the copies between host and device (see cuda_backend.h).
#include "myriad/cuda/cuda_backend.h"

#include "myriad/cuda/check.h"
#include "myriad/cuda/device_guard.h"

namespace myriad::cuda {

Device CudaBackend::device() const { return Device::cuda(context_.device()); }

Tensor CudaBackend::empty(const Shape& shape, DType dtype) {
  const std::size_t bytes = static_cast<std::size_t>(shape_numel(shape)) * dtype_size(dtype);
  CachingAllocator* allocator = &context_.allocator();
  void* data = allocator->allocate(bytes, reinterpret_cast<StreamId>(context_.stream()));
  auto storage = Storage::wrap(
      data, bytes, device(),
      [allocator](void* ptr) {
        if (ptr != nullptr) allocator->free(ptr);
      },
      this);
  return Tensor::from_storage(std::move(storage), shape, contiguous_strides(shape), 0, dtype);
}

Tensor CudaBackend::copy_from_host(const Tensor& host) {
  MYRIAD_CHECK(host.defined() && host.device().is_cpu(), "CudaBackend::copy_from_host: source "
                                                             << (host.defined() ? host.describe() : "undefined")
                                                             << " is not a host tensor");
  const Tensor source = host.contiguous();
  Tensor result = empty(source.shape(), source.dtype());
  if (source.nbytes() > 0) {
    DeviceGuard guard(context_.device());
    if (!uploads_.upload(result.raw_data(), source.raw_data(), source.nbytes(), context_.stream())) {
      MYRIAD_CUDA_CHECK(cudaMemcpyAsync(result.raw_data(), source.raw_data(), source.nbytes(), cudaMemcpyHostToDevice,
                                        context_.stream()));
      MYRIAD_CUDA_CHECK(cudaStreamSynchronize(context_.stream()));  // `source` may be a temporary
    }
  }
  return result;
}

Tensor CudaBackend::copy_to_host(const Tensor& device_tensor) {
  MYRIAD_CHECK(device_tensor.defined() && device_tensor.storage()->context() == this && device_tensor.is_contiguous(),
               "CudaBackend::copy_to_host: " << (device_tensor.defined() ? device_tensor.describe() : "undefined")
                                             << " is not a contiguous tensor of this backend");
  Tensor result = Tensor::empty(device_tensor.shape(), device_tensor.dtype());
  if (device_tensor.nbytes() > 0) {
    DeviceGuard guard(context_.device());
    MYRIAD_CUDA_CHECK(cudaMemcpyAsync(result.raw_data(), device_tensor.raw_data(), device_tensor.nbytes(),
                                      cudaMemcpyDeviceToHost, context_.stream()));
    MYRIAD_CUDA_CHECK(cudaStreamSynchronize(context_.stream()));
  }
  return result;
}

void CudaBackend::zero(const Tensor& device_tensor) {
  MYRIAD_CHECK(device_tensor.defined() && device_tensor.storage()->context() == this && device_tensor.is_contiguous(),
               "CudaBackend::zero: " << (device_tensor.defined() ? device_tensor.describe() : "undefined")
                                     << " is not a contiguous tensor of this backend");
  if (device_tensor.nbytes() == 0) return;
  DeviceGuard guard(context_.device());
  MYRIAD_CUDA_CHECK(cudaMemsetAsync(device_tensor.raw_data(), 0, device_tensor.nbytes(), context_.stream()));
}

void CudaBackend::synchronize() { context_.synchronize(); }

}  // namespace myriad::cuda
