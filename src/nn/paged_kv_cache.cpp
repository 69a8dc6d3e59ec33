// PagedKvCache allocation and KvBlockPool bookkeeping (nn/paged_kv_cache.h).
#include "myriad/nn/paged_kv_cache.h"

#include <algorithm>
#include <functional>

#include "myriad/core/error.h"

namespace myriad::nn {

PagedKvCache::PagedKvCache(std::int64_t layers, std::int64_t kv_heads, std::int64_t head_dim,
                           std::int64_t block_size_in, std::int64_t num_blocks_in, const ops::Placement& placement)
    : block_size(block_size_in), num_blocks(num_blocks_in) {
  MYRIAD_CHECK(block_size >= 1 && num_blocks >= 1,
               "PagedKvCache: block_size " << block_size << " and num_blocks " << num_blocks << " must be >= 1");
  for (std::int64_t l = 0; l < layers; ++l) {
    k.push_back(placement.zeros({num_blocks * block_size, kv_heads, head_dim}));
    v.push_back(placement.zeros({num_blocks * block_size, kv_heads, head_dim}));
  }
}

std::int64_t PagedKvCache::bytes_per_block() const {
  std::int64_t bytes = 0;
  for (std::size_t l = 0; l < k.size(); ++l) bytes += (k[l].nbytes() + v[l].nbytes()) / num_blocks;
  return bytes;
}

KvBlockPool::KvBlockPool(std::int64_t num_blocks) : total_(num_blocks), in_use_(num_blocks, false) {
  MYRIAD_CHECK(num_blocks >= 1, "KvBlockPool: num_blocks " << num_blocks << " must be >= 1");
  for (std::int64_t b = num_blocks - 1; b >= 0; --b) free_.push_back(static_cast<std::int32_t>(b));
}

void KvBlockPool::allocate(std::int64_t count, std::vector<std::int32_t>& table) {
  MYRIAD_CHECK(count >= 0 && count <= free_blocks(),
               "KvBlockPool: " << count << " blocks asked for, " << free_blocks() << " free");
  for (std::int64_t i = 0; i < count; ++i) {
    const std::int32_t b = free_.back();
    free_.pop_back();
    in_use_[b] = true;
    table.push_back(b);
  }
}

void KvBlockPool::release(std::vector<std::int32_t>& table) {
  for (std::int32_t b : table) {
    MYRIAD_CHECK(b >= 0 && b < total_ && in_use_[b], "KvBlockPool: block " << b << " released but not in use");
    in_use_[b] = false;
    free_.push_back(b);
  }
  table.clear();
  // Keep the lowest ids on top so that layouts do not depend on release order.
  std::sort(free_.begin(), free_.end(), std::greater<>());
}

}  // namespace myriad::nn
