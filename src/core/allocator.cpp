// Aligned host allocation and Storage lifetime.
#include "myriad/core/allocator.h"

#include <cstdlib>

#include "myriad/core/error.h"

namespace myriad {

void* aligned_host_alloc(std::size_t bytes) {
  std::size_t rounded = (bytes + kHostAlignment - 1) / kHostAlignment * kHostAlignment;
  if (rounded == 0) rounded = kHostAlignment;
  void* ptr = std::aligned_alloc(kHostAlignment, rounded);
  MYRIAD_CHECK(ptr != nullptr, "host allocation of " << bytes << " bytes failed");
  return ptr;
}

void aligned_host_free(void* ptr) noexcept { std::free(ptr); }

Storage::Storage(void* data, std::size_t bytes, Device device, Deleter deleter, ExecutionContext* context)
    : data_(data), bytes_(bytes), device_(device), deleter_(std::move(deleter)), context_(context) {}

Storage::~Storage() {
  if (deleter_) deleter_(data_);
}

std::shared_ptr<Storage> Storage::allocate_host(std::size_t bytes) {
  void* ptr = aligned_host_alloc(bytes);
  return std::make_shared<Storage>(ptr, bytes, Device::cpu(), aligned_host_free);
}

std::shared_ptr<Storage> Storage::wrap(void* data, std::size_t bytes, Device device, Deleter deleter,
                                       ExecutionContext* context) {
  return std::make_shared<Storage>(data, bytes, device, std::move(deleter), context);
}

}  // namespace myriad
