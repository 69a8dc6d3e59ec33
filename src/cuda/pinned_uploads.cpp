// PinnedUploads: a slot is reused once the event behind its last copy has fired (asked without
// waiting; a busy oldest slot gets a new slot put in front of it, so the ring grows to the uploads
// a step keeps in flight); a slot too small for the next upload is freed and allocated again at
// the next power of two (at least 64 KiB).
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

PinnedUploads::Slot& PinnedUploads::take_slot() {
  if (slots_.empty()) slots_.emplace_back();
  Slot* oldest = &slots_[next_];
  if (oldest->pending) {
    const cudaError_t state = cudaEventQuery(oldest->copied);
    if (state == cudaSuccess) {
      oldest->pending = false;
    } else if (state == cudaErrorNotReady && slots_.size() < kMaxSlots) {
      // Its copy is still queued: a new slot goes in front of it (the newest, just before the oldest).
      slots_.insert(slots_.begin() + static_cast<std::ptrdiff_t>(next_), Slot{});
      Slot& fresh = slots_[next_];
      next_ = (next_ + 1) % slots_.size();
      return fresh;
    } else {
      if (state != cudaErrorNotReady) MYRIAD_CUDA_CHECK(state);
      MYRIAD_CUDA_CHECK(cudaEventSynchronize(oldest->copied));  // every slot busy: its copy has read the bytes
      oldest->pending = false;
    }
  }
  Slot& slot = slots_[next_];
  next_ = (next_ + 1) % slots_.size();
  return slot;
}

bool PinnedUploads::upload(void* dst, const void* src, std::size_t bytes, cudaStream_t stream) {
  if (bytes > kMaxStagedBytes) return false;
  if (bytes == 0) return true;
  Slot& slot = take_slot();
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
