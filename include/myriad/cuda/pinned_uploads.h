// PinnedUploads — small host-to-device copies (a step's token ids and targets, the kernels' bad-
// index flags) through reusable page-locked staging buffers, so that each is a DMA queued on the
// stream and the caller neither waits for the stream nor keeps its source alive.
//
// Invariants: a ring of slots, each a pinned buffer and an event recorded behind the last copy out
// of it; a slot is written again only after its event has fired, so a queued copy never reads
// bytes of a later upload. The host never waits for that while it can grow the ring: when the
// oldest slot's copy is still queued (the host runs ahead of the GPU, as it should inside a
// step), a new slot is put in front of it, up to kMaxSlots; only then does upload() wait.
// Copies over kMaxStagedBytes are not staged (upload() answers false: the caller copies the
// pageable way, waiting — one-off uploads such as parameters). Owned by one CudaBackend (one
// thread drives it); the destructor waits for every slot's last copy and frees the buffers,
// never throwing.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <vector>

namespace myriad::cuda {

class PinnedUploads {
 public:
  static constexpr std::size_t kMaxSlots = 64;
  static constexpr std::size_t kMaxStagedBytes = std::size_t{4} << 20;

  PinnedUploads() = default;
  ~PinnedUploads();
  PinnedUploads(const PinnedUploads&) = delete;
  PinnedUploads& operator=(const PinnedUploads&) = delete;

  // Queues dst (device memory) <- src (bytes of host memory) on `stream`, staged through the next
  // slot; returns at once with src free to change. False (nothing queued) when bytes exceed
  // kMaxStagedBytes. The current device must be the stream's.
  bool upload(void* dst, const void* src, std::size_t bytes, cudaStream_t stream);

 private:
  struct Slot {
    void* host = nullptr;  // pinned, `capacity` bytes
    std::size_t capacity = 0;
    cudaEvent_t copied = nullptr;  // recorded behind the slot's last copy
    bool pending = false;          // `copied` was recorded and not yet waited for
  };
  // The slot the next upload uses: the oldest, or a new one put before it while that one's copy is
  // still queued (see above).
  Slot& take_slot();

  std::vector<Slot> slots_;
  std::size_t next_ = 0;  // the oldest slot
};

}  // namespace myriad::cuda
