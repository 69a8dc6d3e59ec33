// Block selection as ops — which key blocks each (b, query head, query block) row of a selecting
// block-sparse attention reads (model.attention with sparse_ratio > 0, nn/block_selection.h has
// the rule), computed where q and k are: no copy to the host inside a step.
//
// block_means: out (B, H, nb, D) = the mean of the rows of each block of x (B, H, T, D) (f32, any
//   strides with unit-stride D; nb = blocks_covering(T, block_size)), summed in float64 in row
//   order and rounded once, on every backend (so the CPU and CUDA means are bit-identical).
// select_blocks: from the whole sequence's means qbar (B, Hq, nb, D) and kbar (B, Hkv, nb, D),
//   for every row r = (b Hq + h) nb + qb the ops/block_layout.h rules choose (block 0 reads only
//   itself; qb >= 1: the fixed pattern, then past blocks by descending estimated weight w; equal
//   weights go to the lower block, a NaN weight is the lowest and never kept). Scores are
//   scale * qbar[qb - 1] . kbar[kb] in f32; the weights, the threshold and the mass in float64.
// Output: a fixed-capacity layout, sized on the host from the shapes and the args alone:
//   key_blocks (R, cap) i32  row r's kept blocks ascending in [r cap, r cap + counts[r]), the
//                            rest padded with nb (past the sequence: the attention kernels skip
//                            such an entry, and the row stays sorted for their binary search)
//   row_begin  (R + 1)  i64  r * cap (the CSR view the CUDA attention kernels read directly)
//   counts     (R)      i32  kept blocks of row r; 0 for a row not wanted
//   mass       (R)      f64  the kept past blocks' estimated share (0 for rows with qb = 0)
//   totals     (5)      f64  ADDED to when defined: [0] wanted rows, [1] their kept blocks, [2]
//                            the blocks dense causal attention would read, [3] selecting rows
//                            (qb >= 1), [4] the sum of their mass, taken in row order from 0
// Rows wanted: all (chunk_blocks 0), or under context parallelism those in chunks chunk0 / chunk1
// of chunk_blocks blocks (the others are empty: count 0, all padding). R = B Hq nb.
// Memory: 4 R cap bytes of key blocks: with max_blocks 0 (no cap) cap = nb, so the layout grows as
// B Hq nb^2; set a cap for long sequences. The CUDA kernel holds a row's nb weights in shared
// memory (9 nb bytes: nb up to ~25,000 on an H100).
// The CPU op is the reference (and gives the layouts nn::attention_layout has always given: the
// same f32 matmul scores in chunks of 256 query blocks); the CUDA kernel takes the same steps in
// the same order, so layouts agree except where rounding of exp / dot products breaks a tie.
#pragma once

#include <cstdint>

#include "myriad/core/tensor.h"
#include "myriad/ops/block_layout.h"

namespace myriad {

struct BlockSelectArgs {
  FixedBlockPattern fixed;
  std::int64_t block_size = 64;
  double sparse_ratio = 0.0;            // stop once the kept past blocks' estimated share reaches it
  double threshold = 0.0;               // keep only w >= threshold * max w
  std::int64_t max_blocks = 0;          // selected blocks per row beyond the fixed pattern; 0: no cap
  float scale = 1.0f;                   // the attention's softmax scale
  std::int64_t seq_len = 0;             // T of the whole sequence (the last block may be short)
  std::int64_t chunk_blocks = 0;        // 0: every row wanted; else the cp chunks' size in blocks
  std::int64_t chunk0 = 0, chunk1 = 0;  // the two wanted chunks (chunk_blocks > 0)

  bool wanted(std::int64_t qb) const {
    if (chunk_blocks <= 0) return true;
    const std::int64_t chunk = qb / chunk_blocks;
    return chunk == chunk0 || chunk == chunk1;
  }
};

// The fixed-capacity layout select_blocks writes (tensors on one device), plus its geometry.
struct SelectedBlocks {
  std::int64_t block_size = 64, query_blocks = 0, sets = 0, capacity = 0;
  Tensor key_blocks, row_begin, counts, mass;
};

// cap: the most blocks a row may keep, from the args and nb alone (the layout's row width).
std::int64_t selection_capacity(const BlockSelectArgs& args, std::int64_t query_blocks);
// The tensors of a layout for `sets` = B * Hq rows sets of nb query blocks on `like`'s device.
SelectedBlocks empty_selected_blocks(const BlockSelectArgs& args, std::int64_t sets, std::int64_t query_blocks,
                                     const Tensor& like);
// The compressed host layout (ops/block_layout.h) of a selection (copies to the host if needed).
BlockLayout compact_layout(const SelectedBlocks& selected);

void block_means(const Tensor& x, std::int64_t block_size, Tensor& out);
void select_blocks(const BlockSelectArgs& args, const Tensor& qbar, const Tensor& kbar, SelectedBlocks& out,
                   Tensor& totals);

namespace cpu {
void block_means(const Tensor& x, std::int64_t block_size, Tensor& out);
void select_blocks(const BlockSelectArgs& args, const Tensor& qbar, const Tensor& kbar, SelectedBlocks& out,
                   Tensor& totals);
}  // namespace cpu

}  // namespace myriad
