// Fixed block-sparse patterns and the layout invariants (ops/block_layout.h).
#include "myriad/ops/block_layout.h"

#include "myriad/core/error.h"

namespace myriad {

std::int64_t blocks_covering(std::int64_t seq_len, std::int64_t block_size) {
  MYRIAD_CHECK(block_size >= 1, "block-sparse attention: block_size must be at least 1, got " << block_size);
  return (seq_len + block_size - 1) / block_size;
}

bool in_fixed_pattern(const FixedBlockPattern& pattern, std::int64_t qb, std::int64_t kb) {
  if (kb > qb) return false;
  if (qb - kb <= pattern.local_blocks) return true;  // the diagonal block and the window
  if (kb < pattern.global_blocks) return true;
  return pattern.stride_blocks > 0 && (qb - kb) % pattern.stride_blocks == 0;
}

BlockLayout fixed_block_layout(const FixedBlockPattern& pattern, std::int64_t seq_len, std::int64_t block_size) {
  MYRIAD_CHECK(pattern.local_blocks >= 0 && pattern.global_blocks >= 0 && pattern.stride_blocks >= 0,
               "block-sparse attention: local_blocks, global_blocks and stride_blocks must be >= 0, got "
                   << pattern.local_blocks << ", " << pattern.global_blocks << ", " << pattern.stride_blocks);
  BlockLayout layout;
  layout.block_size = block_size;
  layout.query_blocks = blocks_covering(seq_len, block_size);
  layout.row_begin.reserve(static_cast<std::size_t>(layout.query_blocks) + 1);
  for (std::int64_t qb = 0; qb < layout.query_blocks; ++qb) {
    for (std::int64_t kb = 0; kb <= qb; ++kb) {
      if (in_fixed_pattern(pattern, qb, kb)) layout.key_blocks.push_back(static_cast<std::int32_t>(kb));
    }
    layout.row_begin.push_back(static_cast<std::int64_t>(layout.key_blocks.size()));
  }
  return layout;
}

BlockLayout dense_causal_layout(std::int64_t seq_len, std::int64_t block_size) {
  const std::int64_t blocks = blocks_covering(seq_len, block_size);
  return fixed_block_layout(FixedBlockPattern{.local_blocks = blocks}, seq_len, block_size);
}

void check_block_layout(const BlockLayout& layout, const std::string& what) {
  MYRIAD_CHECK(layout.block_size >= 1, what << ": block_size must be at least 1, got " << layout.block_size);
  MYRIAD_CHECK(layout.sets >= 1 && layout.query_blocks >= 0,
               what << ": layout has " << layout.sets << " sets of " << layout.query_blocks << " query blocks");
  const std::size_t rows = static_cast<std::size_t>(layout.sets * layout.query_blocks);
  MYRIAD_CHECK(layout.row_begin.size() == rows + 1, what
                                                        << ": row_begin has " << layout.row_begin.size()
                                                        << " entries, expected sets * query_blocks + 1 = " << rows + 1);
  MYRIAD_CHECK(layout.row_begin.front() == 0 && layout.row_begin.back() == layout.kept_blocks(),
               what << ": row_begin must run from 0 to the " << layout.kept_blocks() << " key blocks, runs from "
                    << layout.row_begin.front() << " to " << layout.row_begin.back());
  for (std::size_t r = 0; r < rows; ++r) {
    MYRIAD_CHECK(layout.row_begin[r] <= layout.row_begin[r + 1], what << ": row_begin decreases at row " << r);
    for (std::int64_t e = layout.row_begin[r]; e < layout.row_begin[r + 1]; ++e) {
      const std::int32_t kb = layout.key_blocks[static_cast<std::size_t>(e)];
      MYRIAD_CHECK(kb >= 0 && kb < layout.query_blocks,
                   what << ": row " << r << " lists key block " << kb << " outside [0, " << layout.query_blocks << ")");
      MYRIAD_CHECK(e == layout.row_begin[r] || layout.key_blocks[static_cast<std::size_t>(e - 1)] < kb,
                   what << ": the key blocks of row " << r << " do not ascend strictly (" << kb << " after "
                        << layout.key_blocks[static_cast<std::size_t>(e - 1)] << ")");
    }
  }
}

}  // namespace myriad
