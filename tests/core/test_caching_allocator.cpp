// CachingAllocator over a host-memory raw allocator with a capacity (the logic is the same over
// cudaMalloc; this runs it where no GPU is): rounding, reuse per stream, best fit, splitting and
// coalescing, release of free segments when the raw allocator runs out, the out-of-memory
// message, and the statistics (in use, reserved, peaks, fragmentation).
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>

#include "myriad/core/caching_allocator.h"
#include "myriad/core/error.h"

namespace myriad {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

class HostRaw final : public RawAllocator {
 public:
  explicit HostRaw(std::size_t capacity) : capacity_(capacity) {}
  ~HostRaw() override { EXPECT_EQ(live_.size(), 0u) << "segments not returned"; }
  void* allocate(std::size_t bytes) override {
    if (used_ + bytes > capacity_) return nullptr;
    void* p = std::aligned_alloc(512, bytes);
    live_[p] = bytes;
    used_ += bytes;
    ++calls;
    return p;
  }
  void release(void* ptr, std::size_t bytes) override {
    auto found = live_.find(ptr);
    ASSERT_NE(found, live_.end());
    EXPECT_EQ(found->second, bytes) << "released with another size than allocated";
    used_ -= bytes;
    live_.erase(found);
    std::free(ptr);
  }
  std::string describe() const override { return "host test device"; }
  std::size_t used() const { return used_; }
  int calls = 0;

 private:
  std::size_t capacity_, used_ = 0;
  std::map<void*, std::size_t> live_;
};

std::uintptr_t address(void* p) { return reinterpret_cast<std::uintptr_t>(p); }

TEST(CachingAllocator, RoundsSizesIntoTwoPools) {
  EXPECT_EQ(CachingAllocator::rounded_size(1), 512u);
  EXPECT_EQ(CachingAllocator::rounded_size(512), 512u);
  EXPECT_EQ(CachingAllocator::rounded_size(513), 1024u);
  EXPECT_EQ(CachingAllocator::rounded_size(MiB), MiB);
  EXPECT_EQ(CachingAllocator::rounded_size(MiB + 1), 2 * MiB);
  EXPECT_EQ(CachingAllocator::rounded_size(5 * MiB), 6 * MiB);
}

TEST(CachingAllocator, ReusesFreedBlocksOfTheSameStreamOnly) {
  HostRaw raw(64 * MiB);
  CachingAllocator cache(raw);
  EXPECT_EQ(cache.allocate(0), nullptr);
  void* a = cache.allocate(1000, 1);
  cache.free(a);
  void* b = cache.allocate(900, 1);
  EXPECT_EQ(b, a) << "a freed block is reused on its stream";
  void* c = cache.allocate(900, 2);
  EXPECT_NE(address(c), address(a));
  EXPECT_EQ(raw.calls, 2) << "stream 2 gets its own small segment";
  CachingAllocatorStats s = cache.stats();
  EXPECT_EQ(s.in_use, 2048u);
  EXPECT_EQ(s.reserved, 2 * CachingAllocator::kSmallSegment);
  EXPECT_EQ(s.segments, 2);
  EXPECT_GE(s.cache_hits, 1);
  cache.free(b);
  cache.free(c);
  EXPECT_THROW(cache.free(c), Error) << "double free";
  int local = 0;
  EXPECT_THROW(cache.free(&local), Error) << "foreign pointer";
}

TEST(CachingAllocator, SplitsBestFitAndCoalescesBackToWholeSegments) {
  HostRaw raw(64 * MiB);
  CachingAllocator cache(raw);
  // Small pool: consecutive blocks of one 2 MiB segment.
  void* a = cache.allocate(1000);
  void* b = cache.allocate(1000);
  EXPECT_EQ(address(b), address(a) + 1024);
  cache.free(a);
  cache.free(b);  // merges with a and with the rest of the segment
  CachingAllocatorStats s = cache.stats();
  EXPECT_EQ(s.largest_cached, CachingAllocator::kSmallSegment);
  EXPECT_EQ(s.fragmentation, 0.0);
  cache.release_cached();
  EXPECT_EQ(cache.stats().reserved, 0u);
  EXPECT_EQ(raw.used(), 0u);
  // Large pool: a cached 6 MiB block serves a 3 MiB request (4 MiB rounded) and keeps 2 MiB.
  void* big = cache.allocate(6 * MiB);
  cache.free(big);
  void* part = cache.allocate(3 * MiB);
  EXPECT_EQ(part, big);
  s = cache.stats();
  EXPECT_EQ(s.splits, 3) << "two small splits above, one large";
  EXPECT_EQ(s.in_use, 4 * MiB);
  EXPECT_EQ(s.cached, 2 * MiB);
  // Best fit: with 2 MiB and 8 MiB blocks cached, a 2 MiB request takes the 2 MiB one.
  void* eight = cache.allocate(8 * MiB);
  cache.free(eight);
  void* two = cache.allocate(2 * MiB);
  EXPECT_EQ(address(two), address(big) + 4 * MiB);
  cache.free(part);
  cache.free(two);
  s = cache.stats();
  EXPECT_EQ(s.cached, 14 * MiB);
  EXPECT_EQ(s.largest_cached, 8 * MiB);
  EXPECT_NEAR(s.fragmentation, 1.0 - 8.0 / 14.0, 1e-12);
  EXPECT_EQ(s.peak_in_use, 12 * MiB) << "the 4 MiB part and the 8 MiB block were in use together";
}

TEST(CachingAllocator, OutOfMemoryReleasesCachedSegmentsThenNamesTheNumbers) {
  HostRaw raw(8 * MiB);
  CachingAllocator cache(raw);
  void* four = cache.allocate(4 * MiB);
  cache.free(four);                     // cached: 4 MiB reserved, none in use
  void* six = cache.allocate(6 * MiB);  // does not fit beside the cached 4 MiB: they are released first
  ASSERT_NE(six, nullptr);
  EXPECT_EQ(cache.stats().reserved, 6 * MiB);
  EXPECT_EQ(raw.calls, 2);
  try {
    cache.allocate(4 * MiB);
    FAIL() << "8 MiB of capacity served 10";
  } catch (const Error& e) {
    const std::string what = e.what();
    for (const char* needle :
         {"out of memory on host test device", "cannot reserve 4.0 MiB", "in use 6.0 MiB", "reserved 6.0 MiB"}) {
      EXPECT_NE(what.find(needle), std::string::npos) << what;
    }
  }
  cache.free(six);
  EXPECT_EQ(cache.stats().peak_reserved, 6 * MiB);
}

// A captured CUDA graph keeps using the addresses its capture was handed, freed or not: a private
// pool's blocks are reused inside that pool only, never by the shared pools, and survive the
// out-of-memory release; once retired, the pool's segments go back as they become free.
TEST(CachingAllocator, PrivatePoolBlocksStayInThePool) {
  HostRaw raw(64 * MiB);
  CachingAllocator cache(raw);
  const PoolId graph = cache.create_private_pool();
  EXPECT_NE(graph, 0u);
  cache.set_allocation_pool(graph);
  void* captured_small = cache.allocate(1000);
  void* captured_large = cache.allocate(3 * MiB);
  void* kept = cache.allocate(1000);  // outlives the capture (a lazily made tensor)
  cache.free(captured_small);
  cache.free(captured_large);
  cache.set_allocation_pool(0);
  EXPECT_EQ(cache.allocation_pool(), 0u);
  void* shared_small = cache.allocate(1000);
  void* shared_large = cache.allocate(3 * MiB);
  EXPECT_NE(address(shared_small), address(captured_small));  // a new 2 MiB segment, not the graph's
  EXPECT_NE(address(shared_large), address(captured_large));
  EXPECT_EQ(raw.calls, 4);
  cache.free(shared_small);
  cache.free(shared_large);
  cache.release_cached();  // the shared segments only
  EXPECT_EQ(raw.calls, 4);
  EXPECT_EQ(cache.stats().reserved, 2 * MiB + 4 * MiB);  // the private pool's small and large segments
  cache.set_allocation_pool(graph);                      // the pool hands its own blocks back, best fit
  void* again = cache.allocate(3 * MiB);
  EXPECT_EQ(address(again), address(captured_large));
  cache.set_allocation_pool(0);
  cache.free(again);  // back to the graph's pool, though the shared pools are current
  void* other = cache.allocate(3 * MiB);
  EXPECT_NE(address(other), address(captured_large));
  cache.free(other);
  cache.release_cached();
  EXPECT_EQ(raw.calls, 5);
  cache.set_allocation_pool(graph);
  again = cache.allocate(3 * MiB);
  cache.set_allocation_pool(0);
  cache.release_private_pool(graph);  // the large segment is in use; the small one holds `kept`
  EXPECT_EQ(cache.stats().reserved, 2 * MiB + 4 * MiB);
  EXPECT_THROW(cache.set_allocation_pool(graph), Error);
  EXPECT_THROW(cache.release_private_pool(graph), Error);
  cache.free(kept);  // its segment is whole again: released
  EXPECT_EQ(cache.stats().reserved, 4 * MiB);
  cache.free(again);
  EXPECT_EQ(cache.stats().reserved, 0u);
  EXPECT_EQ(raw.used(), 0u);
}

}  // namespace
}  // namespace myriad
