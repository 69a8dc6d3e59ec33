// BlockLayout — which key blocks each query block of a block-sparse attention reads.
//
// The sequence is cut into blocks of `block_size` positions counted from global position 0: block
// n holds positions [n * block_size, (n + 1) * block_size). For every row set s and query block qb
// the layout lists the kept key blocks in strictly ascending order (compressed rows: entries
// [row_begin[r], row_begin[r + 1]) of key_blocks, r = s * query_blocks + qb). `sets` is 1 (one
// pattern for every batch entry and head) or B * Hq (set b * Hq + h: a pattern per head, as the
// data-dependent selection builds). Causal layouts list no key block after the query block; the
// causal mask inside the diagonal block is the attention kernel's, not the layout's.
//
// Invariants (check_block_layout): block_size >= 1, row_begin has sets * query_blocks + 1
// non-decreasing entries from 0 to key_blocks.size(), every entry of a row lies in
// [0, query_blocks) and the entries of a row ascend strictly. A query block whose row lists no
// visible key has no output (zeros, lse = -inf).
//
// Fixed patterns (fixed_block_layout): the diagonal block, the `local_blocks` blocks before it
// (a causal sliding window), the first `global_blocks` blocks of the sequence (attention sinks)
// and, with `stride_blocks` = s > 0, every block kb < qb with (qb - kb) % s == 0 (strided).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace myriad {

struct BlockLayout {
  std::int64_t block_size = 64;
  std::int64_t query_blocks = 0;  // blocks of the whole (global) sequence
  std::int64_t sets = 1;          // 1, or B * Hq
  std::vector<std::int64_t> row_begin{0};
  std::vector<std::int32_t> key_blocks;

  // The kept key blocks of query block qb in set `set` (set 0 when the layout is shared).
  std::span<const std::int32_t> row(std::int64_t set, std::int64_t qb) const {
    const std::int64_t r = (sets == 1 ? 0 : set) * query_blocks + qb;
    return {key_blocks.data() + row_begin[r], static_cast<std::size_t>(row_begin[r + 1] - row_begin[r])};
  }
  std::int64_t kept_blocks() const { return static_cast<std::int64_t>(key_blocks.size()); }
};

struct FixedBlockPattern {
  std::int64_t local_blocks = 0;   // blocks before the diagonal one (causal sliding window)
  std::int64_t global_blocks = 0;  // the sequence's first blocks, seen by every query block
  std::int64_t stride_blocks = 0;  // 0: none; s: blocks at distance s, 2s, ... before the diagonal
};

// Blocks needed to cover `seq_len` positions.
std::int64_t blocks_covering(std::int64_t seq_len, std::int64_t block_size);

// One shared causal pattern for a sequence of seq_len positions.
BlockLayout fixed_block_layout(const FixedBlockPattern& pattern, std::int64_t seq_len, std::int64_t block_size);

// Whether key block kb is in the fixed pattern of query block qb (kb <= qb).
bool in_fixed_pattern(const FixedBlockPattern& pattern, std::int64_t qb, std::int64_t kb);

// Every causal block: the dense causal attention expressed as a layout (tests, benchmarks).
BlockLayout dense_causal_layout(std::int64_t seq_len, std::int64_t block_size);

// Throws naming `what` and the first broken invariant (see the top of this file).
void check_block_layout(const BlockLayout& layout, const std::string& what);

}  // namespace myriad
