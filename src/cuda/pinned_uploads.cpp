// PinnedUploads: a slot is reused after cudaEventSynchronize on the event behind its last copy (in
// the steady state the copy finished long ago: the wait returns at once); a slot too small for the
// next upload is freed and allocated again at the next power of two (at least 64 KiB).
#include "myriad/cuda/pinned_uploads.h"

#include <cstring>

#include "myriad/cuda/check.h"

namespace myriad::cuda {

namespace {

std::size_t staged_capacity(std::size_t bytes) {
  std::size_t capacity = std::size_t{64} << 10;
  while (capacity < bytes) capacity *= 2;
  return capacity;
}

}  // namespace

PinnedUploads::~PinnedUploads() {
  for (Slot& slot : slots_) {
    if (slot.pending) (void)cudaEventSynchronize(slot.copied);
    if (slot.copied != nullptr) (void)cudaEventDestroy(slot.copied);
    if (slot.host != nullptr) (void)cudaFreeHost(slot.host);
  }
}

bool PinnedUploads::upload(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes > kMaxStagedBytes) return false;
  if (bytes == 0) return true;
  Slot& slot = slots_[static_cast<std::size_t>(next_)];
  next_ = (next_ + 1) % kSlots;
  if (slot.pending) {
    MYRIAD_CUDA_CHECK(cudaEventSynchronize(slot.copied));  // its previous copy has read the bytes
    slot.pending = false;
  }
  if (slot.copied == nullptr) MYRIAD_CUDA_CHECK(cudaEventCreateWithFlags(&slot.copied, cudaEventDisableTiming));
  if (slot.capacity < bytes) {
    if (slot.host != nullptr) MYRIAD_CUDA_CHECK(cudaFreeHost(slot.host));
    slot.host = nullptr;
    slot.capacity = 0;
    const std::size_t capacity = staged_capacity(bytes);
    MYRIAD_CUDA_CHECK(cudaMallocHost(&slot.host, capacity));
    slot.capacity = capacity;
  }
  std::memcpy(slot.host, src, bytes);
  MYRIAD_CUDA_CHECK(cudaMemcpyAsync(dst, slot.host, bytes, cudaMemcpyHostToDevice, stream));
  MYRIAD_CUDA_CHECK(cudaEventRecord(slot.copied, stream));
  slot.pending = true;
  return true;
}

}  // namespace myriad::cuda
