// DeviceRawAllocator: cudaMalloc that reports out-of-memory as nullptr; cudaFree. A cudaMalloc
// while the thread records a CUDA graph (a private pool growing during capture) runs in relaxed
// capture mode: the allocation is not part of the graph and outlives it in the pool, which is what
// the graph needs (cudaThreadExchangeStreamCaptureMode's documented push-pop use).
#include "myriad/cuda/device_allocator.h"

#include "myriad/cuda/check.h"
#include "myriad/cuda/device_guard.h"

namespace myriad::cuda {

void* DeviceRawAllocator::allocate(std::size_t bytes) {
  DeviceGuard guard(device_);
  void* ptr = nullptr;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  MYRIAD_CUDA_CHECK(cudaThreadExchangeStreamCaptureMode(&mode));
  const cudaError_t status = cudaMalloc(&ptr, bytes);
  (void)cudaThreadExchangeStreamCaptureMode(&mode);  // the thread's mode before
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
