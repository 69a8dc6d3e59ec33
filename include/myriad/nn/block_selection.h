// The block-sparse layout of one attention call (model.attention.kind: block_sparse), and what it kept.
//
// Fixed pattern (spec.fixed, ops/block_layout.h): one layout shared by every head.
// Selection (spec.sparse_ratio > 0): one layout per (batch entry b, query head h), block-selection
// attention in the style of MoBA / NSA, causal by construction. For query block qb >= 1:
//   summaries  kbar[kb] = the mean of the keys of block kb (h's kv head); qbar = the mean of the
//              queries of block qb - 1. The previous block, not qb itself: a choice made from qb's
//              own queries would let later tokens of the block change which keys earlier ones
//              see; from the previous block every token of qb gets the same, causal choice, which
//              generation can make before the block's first token.
//   estimate   w[kb] = softmax over kb < qb of (scale qbar . kbar[kb] + log n_kb), n_kb the block's
//              rows: the estimated share of qb's attention mass (over past blocks) in block kb.
//   keep       the fixed pattern's blocks (always the diagonal one), then the other past blocks
//              by descending w (ties: the lower block) while the kept past blocks' estimated share
//              is below sparse_ratio, fewer than max_blocks were added (0: no cap) and
//              w >= threshold * max w (threshold is relative to the heaviest block: an absolute
//              weight would drop every block of a long sequence, where weights are ~1 / blocks).
// Equal weights go to the lower block; a NaN weight is the lowest and never kept.
// Block 0 reads only itself. The selection is not differentiated: gradients flow through the kept
// blocks, never through the choice. Results depend only on q and k (not on threads or layout).
// Cost: O(T^2 / block_size^2 * D) for the scores (matmuls in chunks of query blocks, memory
// O(chunk * T / block_size)), O(T / block_size * kept) for the layout.
#pragma once

#include <cstdint>

#include "myriad/core/tensor.h"
#include "myriad/nn/context_parallel.h"
#include "myriad/nn/transformer_config.h"
#include "myriad/ops/block_layout.h"
#include "myriad/ops/block_selection.h"

namespace myriad::nn {

// What the layouts of a step kept, summed over calls (layers, micro-batches) and heads.
struct BlockSelectionStats {
  std::int64_t query_blocks = 0;    // (head, query block) rows
  std::int64_t kept_blocks = 0;     // their listed key blocks
  std::int64_t causal_blocks = 0;   // the key blocks dense causal attention would read
  std::int64_t selecting_rows = 0;  // rows that ran the selection (qb >= 1)
  double estimated_mass = 0.0;      // sum over those rows of the kept past blocks' estimated share

  void add(const BlockSelectionStats& other);
};

// The select_blocks op's arguments for `spec` (every row wanted) over a sequence of seq_len.
BlockSelectArgs select_args(const AttentionSpec& spec, float scale, std::int64_t seq_len);
// The stats of select_blocks' totals (5 host f64: ops/block_selection.h); zeros when undefined.
BlockSelectionStats selection_stats(const Tensor& totals);

// The layout for q (B, Hq, T, D) and k (B, Hkv, T, D) (host f32, any strides with unit-stride D;
// read only when the spec selects), with `scale` the attention's. Adds to *stats when given.
BlockLayout attention_layout(const AttentionSpec& spec, const Tensor& q, const Tensor& k, float scale,
                             BlockSelectionStats* stats);

// Under context parallelism (nn/context_parallel.h): q and k hold this rank's two chunks; the
// layout covers the whole sequence, with the rows of this rank's query blocks filled (the same
// rows one process would choose: the block summaries are all-gathered over the group) and the
// others empty; stats count this rank's rows. Collective over the group when the spec selects. A
// group of one is the overload above.
BlockLayout attention_layout(const AttentionSpec& spec, const Tensor& q, const Tensor& k, float scale,
                             const ContextParallel& cp, BlockSelectionStats* stats);

// The selection where q and k are (host or device, f32 (B, H, T_local, D) views with unit-stride
// D; spec.selects()): the fixed-capacity layout of ops/block_selection.h, with the rows of this
// rank's query blocks filled, adding its stats to `totals` (5 f64 on q's device) when defined.
// Nothing is read back to the host: under cp the block means are all-gathered on their device
// (stream-ordered on a device communicator). attention_layout is its compressed host view.
SelectedBlocks selected_blocks(const AttentionSpec& spec, const Tensor& q, const Tensor& k, float scale,
                               const ContextParallel& cp, Tensor& totals);

}  // namespace myriad::nn
