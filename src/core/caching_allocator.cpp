// CachingAllocator: size rounding, per-(stream, pool) best-fit free sets, splitting, coalescing,
// release of free segments on out-of-memory, statistics.
#include "myriad/core/caching_allocator.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include "myriad/core/error.h"

namespace myriad {

struct CachingAllocator::Block {
  std::uintptr_t address = 0;
  std::size_t size = 0;
  StreamId stream = 0;
  PoolId pool = 0;  // the pool the block's segment belongs to
  bool small = false;
  bool in_use = false;
  Block* prev = nullptr;  // neighbours inside the same segment (nullptr at its ends)
  Block* next = nullptr;
};

namespace {

std::string mib(std::size_t bytes) {
  std::ostringstream out;
  out.precision(1);
  out << std::fixed << static_cast<double>(bytes) / (1 << 20) << " MiB";
  return out.str();
}

}  // namespace

CachingAllocator::CachingAllocator(RawAllocator& raw) : raw_(raw) {}

CachingAllocator::~CachingAllocator() {
  for (auto& [address, block] : blocks_) {
    if (block->prev != nullptr) continue;  // segment heads only
    std::size_t bytes = 0;
    for (Block* b = block.get(); b != nullptr; b = b->next) bytes += b->size;
    // NOLINTNEXTLINE(performance-no-int-to-ptr): blocks keep addresses as integers to split them
    raw_.release(reinterpret_cast<void*>(address), bytes);
  }
}

std::size_t CachingAllocator::rounded_size(std::size_t bytes) {
  const std::size_t unit = bytes <= kSmallRequest ? kSmallUnit : kLargeUnit;
  return std::max<std::size_t>(1, (bytes + unit - 1) / unit) * unit;
}

CachingAllocator::Pool& CachingAllocator::pool(PoolId owner, StreamId stream, bool small) {
  return pools_[{owner, stream, small}];
}

void CachingAllocator::insert_free(Block* block) {
  pool(block->pool, block->stream, block->small).free_blocks.insert({block->size, block->address});
}

void CachingAllocator::erase_free(Block* block) {
  pool(block->pool, block->stream, block->small).free_blocks.erase({block->size, block->address});
}

CachingAllocator::Block* CachingAllocator::take_cached(Pool& p, std::size_t size) {
  auto found = p.free_blocks.lower_bound({size, 0});
  if (found == p.free_blocks.end()) return nullptr;
  Block* block = blocks_.at(found->second).get();
  p.free_blocks.erase(found);
  ++stats_.cache_hits;
  return block;
}

CachingAllocator::Block* CachingAllocator::new_segment(std::size_t size, StreamId stream, bool small) {
  const std::size_t bytes = small ? kSmallSegment : size;
  void* memory = raw_.allocate(bytes);
  if (memory == nullptr) {
    release_cached();
    memory = raw_.allocate(bytes);
  }
  if (memory == nullptr) {
    const CachingAllocatorStats s = stats();
    MYRIAD_THROW("out of memory on " << raw_.describe() << ": cannot reserve " << mib(bytes) << " for a request of "
                                     << mib(size) << "; in use " << mib(s.in_use) << ", reserved " << mib(s.reserved)
                                     << ", cached " << mib(s.cached) << " (largest cached block "
                                     << mib(s.largest_cached) << ", fragmentation "
                                     << static_cast<int>(100 * s.fragmentation) << "%)");
  }
  auto block = std::make_unique<Block>();
  block->address = reinterpret_cast<std::uintptr_t>(memory);
  block->size = bytes;
  block->stream = stream;
  block->pool = current_pool_;
  block->small = small;
  Block* raw_block = block.get();
  blocks_[block->address] = std::move(block);
  stats_.reserved += bytes;
  stats_.peak_reserved = std::max(stats_.peak_reserved, stats_.reserved);
  ++stats_.raw_allocations;
  ++stats_.segments;
  return raw_block;
}

void CachingAllocator::split(Block* block, std::size_t size, Pool& p) {
  const std::size_t rest = block->size - size;
  if (rest < (block->small ? kSmallUnit : kSmallRequest)) return;
  auto tail = std::make_unique<Block>();
  tail->address = block->address + size;
  tail->size = rest;
  tail->stream = block->stream;
  tail->pool = block->pool;
  tail->small = block->small;
  tail->prev = block;
  tail->next = block->next;
  if (block->next != nullptr) block->next->prev = tail.get();
  block->next = tail.get();
  block->size = size;
  p.free_blocks.insert({tail->size, tail->address});
  blocks_[tail->address] = std::move(tail);
  ++stats_.splits;
}

void* CachingAllocator::allocate(std::size_t bytes, StreamId stream) {
  if (bytes == 0) return nullptr;
  const bool small = bytes <= kSmallRequest;
  const std::size_t size = rounded_size(bytes);
  Pool& p = pool(current_pool_, stream, small);
  Block* block = take_cached(p, size);
  if (block == nullptr) block = new_segment(size, stream, small);
  split(block, size, pool(current_pool_, stream, small));
  block->in_use = true;
  stats_.in_use += block->size;
  stats_.peak_in_use = std::max(stats_.peak_in_use, stats_.in_use);
  // NOLINTNEXTLINE(performance-no-int-to-ptr): blocks keep addresses as integers to split them
  return reinterpret_cast<void*>(block->address);
}

void CachingAllocator::free(void* ptr) {
  if (ptr == nullptr) return;
  auto found = blocks_.find(reinterpret_cast<std::uintptr_t>(ptr));
  MYRIAD_CHECK(found != blocks_.end() && found->second->in_use,
               "CachingAllocator::free: " << ptr << " on " << raw_.describe()
                                          << " was not handed out by this allocator or is already free");
  Block* block = found->second.get();
  block->in_use = false;
  stats_.in_use -= block->size;
  // Cache it, coalesced with free neighbours of the same segment.
  insert_free(block);
  if (block->next != nullptr && !block->next->in_use) absorb_next(block);
  if (block->prev != nullptr && !block->prev->in_use) {
    block = block->prev;
    absorb_next(block);
  }
  if (block->pool != 0 && retired_pools_.count(block->pool) != 0 && block->prev == nullptr && block->next == nullptr) {
    release_segment(block);
  }
}

// `left` and its next neighbour are both free and cached: `left` takes over the neighbour's bytes.
void CachingAllocator::absorb_next(Block* left) {
  Block* right = left->next;
  erase_free(left);
  erase_free(right);
  left->size += right->size;
  left->next = right->next;
  if (right->next != nullptr) right->next->prev = left;
  blocks_.erase(right->address);
  insert_free(left);
}

void CachingAllocator::release_segment(Block* block) {
  erase_free(block);
  // NOLINTNEXTLINE(performance-no-int-to-ptr): blocks keep addresses as integers to split them
  raw_.release(reinterpret_cast<void*>(block->address), block->size);
  stats_.reserved -= block->size;
  --stats_.segments;
  blocks_.erase(block->address);
}

void CachingAllocator::release_cached() {
  std::vector<Block*> whole;
  for (auto& [address, block] : blocks_) {
    if (block->pool == 0 && block->prev == nullptr && block->next == nullptr && !block->in_use) {
      whole.push_back(block.get());
    }
  }
  for (Block* block : whole) release_segment(block);
}

PoolId CachingAllocator::create_private_pool() { return next_pool_++; }

void CachingAllocator::set_allocation_pool(PoolId id) {
  MYRIAD_CHECK(id == 0 || (id < next_pool_ && retired_pools_.count(id) == 0),
               "CachingAllocator: pool " << id << " on " << raw_.describe() << " is not a live private pool");
  current_pool_ = id;
}

void CachingAllocator::release_private_pool(PoolId id) {
  MYRIAD_CHECK(id != 0 && id < next_pool_ && retired_pools_.count(id) == 0,
               "CachingAllocator: pool " << id << " on " << raw_.describe() << " is not a live private pool");
  if (current_pool_ == id) current_pool_ = 0;
  retired_pools_.insert(id);
  std::vector<Block*> whole;
  for (auto& [address, block] : blocks_) {
    if (block->pool == id && block->prev == nullptr && block->next == nullptr && !block->in_use) {
      whole.push_back(block.get());
    }
  }
  for (Block* block : whole) release_segment(block);
}

CachingAllocatorStats CachingAllocator::stats() const {
  CachingAllocatorStats s = stats_;
  s.cached = s.reserved - s.in_use;
  s.largest_cached = 0;
  for (const auto& [key, p] : pools_) {
    if (!p.free_blocks.empty()) s.largest_cached = std::max(s.largest_cached, p.free_blocks.rbegin()->first);
  }
  s.fragmentation = s.cached == 0 ? 0.0 : 1.0 - static_cast<double>(s.largest_cached) / static_cast<double>(s.cached);
  return s;
}

}  // namespace myriad
