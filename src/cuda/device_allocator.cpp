// DeviceRawAllocator: cudaMalloc that reports out-of-memory as nullptr; cudaFree.
#include "myriad/cuda/device_allocator.h"

#include "myriad/cuda/check.h"
#include "myriad/cuda/device_guard.h"

namespace myriad::cuda {

void* DeviceRawAllocator::allocate(std::size_t bytes) {
  DeviceGuard guard(device_);
  void* ptr = nullptr;
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;
  }
  MYRIAD_CUDA_CHECK(status);
  return ptr;
}

void DeviceRawAllocator::release(void* ptr, std::size_t) {
  DeviceGuard guard(device_);
  (void)cudaFree(ptr);  // never throws: called from destructors
}

}  // namespace myriad::cuda
