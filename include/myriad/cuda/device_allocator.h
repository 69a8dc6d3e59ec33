// DeviceRawAllocator — cudaMalloc / cudaFree on one device, the raw allocator under a
// CachingAllocator (core/caching_allocator.h) that tensors draw device memory from.
//
// allocate() returns nullptr when the device is out of memory (cudaErrorMemoryAllocation, the
// error cleared) so the caching allocator can release its cache and retry; other CUDA failures
// throw myriad::Error. Both run under a DeviceGuard for the allocator's device.
#pragma once

#include <string>

#include "myriad/core/caching_allocator.h"

namespace myriad::cuda {

class DeviceRawAllocator final : public RawAllocator {
 public:
  explicit DeviceRawAllocator(int device) : device_(device) {}
  void* allocate(std::size_t bytes) override;
  void release(void* ptr, std::size_t bytes) override;
  std::string describe() const override { return "cuda:" + std::to_string(device_); }

 private:
  int device_;
};

}  // namespace myriad::cuda
