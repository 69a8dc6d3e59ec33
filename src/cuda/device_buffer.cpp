// DeviceBuffer: cudaMalloc under a DeviceGuard; cudaFree on destruction or move-assignment.
#include "myriad/cuda/device_buffer.h"

#include <utility>

#include "myriad/cuda/check.h"
#include "myriad/cuda/device_guard.h"

namespace myriad::cuda {

DeviceBuffer::DeviceBuffer(std::size_t bytes, int device) : bytes_(bytes), device_(device) {
  if (bytes == 0) return;
  DeviceGuard guard(device);
  const cudaError_t status = cudaMalloc(&data_, bytes);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    data_ = nullptr;
    MYRIAD_THROW("cudaMalloc of " << bytes << " bytes on cuda:" << device << " failed: " << cudaGetErrorName(status)
                                  << " (" << cudaGetErrorString(status) << ")");
  }
}

DeviceBuffer::~DeviceBuffer() { release(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)),
      device_(std::exchange(other.device_, -1)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& other) noexcept {
  if (this != &other) {
    release();
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
    device_ = std::exchange(other.device_, -1);
  }
  return *this;
}

void DeviceBuffer::release() noexcept {
  // cudaFree finds the owning device from the pointer (unified addressing); errors here can only
  // be an earlier sticky fault, which the next checked call reports.
  if (data_ != nullptr) (void)cudaFree(data_);
  (void)cudaGetLastError();
  data_ = nullptr;
  bytes_ = 0;
}

}  // namespace myriad::cuda
