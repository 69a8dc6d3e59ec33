// PagedKvCache — the keys and values of many sequences' past positions, in fixed-size blocks.
//
// Per layer: k, v (num_blocks * block_size, Hkv, D) on the model's placement. Block b holds rows
// [b * block_size, (b + 1) * block_size); a sequence's position p lives in row
// table[p / block_size] * block_size + p % block_size of its block table (a list of block ids,
// KvBlockPool hands them out), so sequences grow one block at a time, share no rows, and a freed
// block is reused by any other sequence. A position's heads are one contiguous row.
#pragma once

#include <cstdint>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/ops/placement.h"

namespace myriad::nn {

struct PagedKvCache {
  std::vector<Tensor> k, v;  // one (num_blocks * block_size, Hkv, D) tensor per layer
  std::int64_t block_size = 0, num_blocks = 0;

  PagedKvCache(std::int64_t layers, std::int64_t kv_heads, std::int64_t head_dim, std::int64_t block_size,
               std::int64_t num_blocks, const ops::Placement& placement = {});
  // Blocks a sequence of `positions` positions needs.
  std::int64_t blocks_for(std::int64_t positions) const { return (positions + block_size - 1) / block_size; }
  // Bytes of one block over every layer (keys and values).
  std::int64_t bytes_per_block() const;
};

// Which blocks are free. allocate() hands out the lowest free ids first (deterministic layouts),
// release() returns them; a block is never handed out twice without a release in between.
class KvBlockPool {
 public:
  explicit KvBlockPool(std::int64_t num_blocks);
  std::int64_t free_blocks() const { return static_cast<std::int64_t>(free_.size()); }
  std::int64_t total_blocks() const { return total_; }
  // Appends `count` block ids to `table`; throws when fewer are free (callers check free_blocks()).
  void allocate(std::int64_t count, std::vector<std::int32_t>& table);
  // Returns every block of `table` to the pool and clears it.
  void release(std::vector<std::int32_t>& table);

 private:
  std::int64_t total_;
  std::vector<std::int32_t> free_;  // a stack: lowest id on top
  std::vector<bool> in_use_;
};

// One sequence's part of a batched decoding step (GptModel::decode): its new tokens at positions
// [start, start + tokens.size()) — a prompt (or a chunk of one) or the one token drawn last —
// attending over its cached positions [0, start) and each other causally. `blocks` covers every
// position up to start + tokens.size().
struct DecodeSequence {
  std::vector<std::int32_t> tokens;
  std::int64_t start = 0;
  const std::vector<std::int32_t>* blocks = nullptr;
};

}  // namespace myriad::nn
