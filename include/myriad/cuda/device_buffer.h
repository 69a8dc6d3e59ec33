// DeviceBuffer — one cudaMalloc'ed allocation on one GPU, freed when the owner goes away.
//
// Move-only. A zero-byte buffer holds no memory (data() is null). Allocation failures throw
// myriad::Error naming the size and device; destruction never throws. This is the plain owning
// buffer for handles' workspaces and tests; tensors get device memory from the allocator layer.
#pragma once

#include <cstddef>

namespace myriad::cuda {

class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(std::size_t bytes, int device);
  ~DeviceBuffer();
  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  void* data() const { return data_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(data_);
  }
  std::size_t bytes() const { return bytes_; }
  int device() const { return device_; }

 private:
  void release() noexcept;

  void* data_ = nullptr;
  std::size_t bytes_ = 0;
  int device_ = -1;
};

}  // namespace myriad::cuda
