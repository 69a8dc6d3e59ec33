// CachingAllocator — a stream-aware caching allocator over a raw allocator (cudaMalloc on a GPU).
//
// Raw device allocations are slow and synchronising, so freed blocks are kept and reused. Rules
// (the design PyTorch's CUDA caching allocator made standard):
//   - Sizes round up: requests up to 1 MiB to a multiple of 512 B, served from 2 MiB segments
//     (the small pool); larger ones to a multiple of 2 MiB, each from a segment of its own size
//     or a cached larger block (the large pool). Pools never mix.
//   - A block belongs to the stream it was allocated for and is reused only for allocations on
//     that stream: work queued on one stream may still read a block another stream would
//     overwrite. (Using a block on a second stream needs an event the caller waits on.)
//   - Best fit: the smallest cached block of the stream and pool that is large enough; a block
//     more than one rounding unit (small) / 1 MiB (large) larger is split and the rest cached.
//   - free() returns a block to the cache and merges it with free neighbours of the same
//     segment, so a segment can become one free block again.
//   - When the raw allocator fails, every cached segment that is entirely free is released and
//     the allocation retried; if it still fails, the error names the request, the bytes in use,
//     reserved and cached, and the largest cached block.
// Private pools (for CUDA graphs): while a private pool is the allocation pool, every allocation
// comes from that pool's own cached blocks or new segments, and a block of it returns to that
// pool when freed, whichever pool is current then — so the addresses a captured graph baked in are
// never handed to anyone else while the graph lives, even once their tensors are freed. The
// shared pools' out-of-memory release never touches a private pool's segments.
// release_private_pool() returns the pool's free segments and retires it: blocks of it still in
// use go back to the raw allocator as their segments become wholly free.
// stats(): bytes in use (allocated, rounded), reserved (held from the raw allocator), their
// peaks, cached = reserved - in use, fragmentation = 1 - largest cached block / cached bytes,
// and counts of raw allocations, cache hits and splits. Not thread-safe: one allocator per
// device, driven by the rank's compute thread.
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <tuple>
#include <unordered_map>

namespace myriad {

class RawAllocator {
 public:
  virtual ~RawAllocator() = default;
  // nullptr when out of memory (throws only for other failures).
  virtual void* allocate(std::size_t bytes) = 0;
  virtual void release(void* ptr, std::size_t bytes) = 0;
  virtual std::string describe() const = 0;  // e.g. "cuda:0", used in error messages
};

using StreamId = std::uintptr_t;  // cudaStream_t as an integer; 0 = the default stream
using PoolId = std::uint64_t;     // 0 = the shared pools; others from create_private_pool()

struct CachingAllocatorStats {
  std::size_t in_use = 0, reserved = 0, cached = 0;
  std::size_t peak_in_use = 0, peak_reserved = 0;
  std::size_t largest_cached = 0;
  double fragmentation = 0.0;  // 1 - largest cached block / cached (0 when nothing is cached)
  std::int64_t raw_allocations = 0, cache_hits = 0, splits = 0, segments = 0;
};

class CachingAllocator {
 public:
  static constexpr std::size_t kSmallRequest = std::size_t{1} << 20;  // up to this: small pool
  static constexpr std::size_t kSmallUnit = 512;
  static constexpr std::size_t kSmallSegment = std::size_t{2} << 20;
  static constexpr std::size_t kLargeUnit = std::size_t{2} << 20;

  explicit CachingAllocator(RawAllocator& raw);  // `raw` must outlive the allocator
  ~CachingAllocator();  // returns every segment to the raw allocator (blocks still in use become invalid)
  CachingAllocator(const CachingAllocator&) = delete;
  CachingAllocator& operator=(const CachingAllocator&) = delete;

  // A block of at least `bytes` (0 gives nullptr) for work on `stream`.
  void* allocate(std::size_t bytes, StreamId stream = 0);
  void free(void* ptr);  // throws for a pointer this allocator did not hand out
  // Returns every segment of the shared pools with no block in use to the raw allocator.
  void release_cached();
  // Private pools (see above). set_allocation_pool(0) returns to the shared pools.
  PoolId create_private_pool();
  void set_allocation_pool(PoolId pool);
  PoolId allocation_pool() const { return current_pool_; }
  void release_private_pool(PoolId pool);
  CachingAllocatorStats stats() const;
  static std::size_t rounded_size(std::size_t bytes);

 private:
  struct Block;
  using FreeKey = std::pair<std::size_t, std::uintptr_t>;  // (size, address): best fit, then lowest address
  struct Pool {
    std::set<FreeKey> free_blocks;
  };

  Pool& pool(PoolId owner, StreamId stream, bool small);
  Block* take_cached(Pool& pool, std::size_t size);
  void split(Block* block, std::size_t size, Pool& pool);
  Block* new_segment(std::size_t size, StreamId stream, bool small);
  void release_segment(Block* block);  // a whole free segment, back to the raw allocator
  void insert_free(Block* block);
  void erase_free(Block* block);
  void absorb_next(Block* left);

  RawAllocator& raw_;
  std::map<std::tuple<PoolId, StreamId, bool>, Pool> pools_;
  PoolId current_pool_ = 0;
  PoolId next_pool_ = 1;
  std::set<PoolId> retired_pools_;
  std::unordered_map<std::uintptr_t, std::unique_ptr<Block>> blocks_;  // every block, by address
  CachingAllocatorStats stats_;
};

}  // namespace myriad
