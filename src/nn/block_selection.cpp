// Block-sparse layouts: the fixed pattern, or the per-head selection (nn/block_selection.h) over
// the ops of ops/block_selection.h, where q and k are: the device keeps its fixed-capacity layout
// (selected_blocks), the host takes its compressed copy (attention_layout). Under cp the block
// means are all-gathered on their device (stream-ordered on a device group).
#include "myriad/nn/block_selection.h"

#include <functional>

#include "myriad/core/error.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/placement.h"

namespace myriad::nn {

namespace {

using std::int64_t;

// (B, H, blocks, D) means of a (B, H, T, D) view (ops/block_selection.h, on its device).
Tensor means_of(const Tensor& x, int64_t block_size) {
  Tensor out = ops::placement_of(x, "block_means")
                   .empty({x.size(0), x.size(1), blocks_covering(x.size(2), block_size), x.size(3)});
  block_means(x, block_size, out);
  return out;
}

}  // namespace

BlockSelectArgs select_args(const AttentionSpec& spec, float scale, std::int64_t seq_len) {
  return BlockSelectArgs{.fixed = spec.fixed,
                         .block_size = spec.block_size,
                         .sparse_ratio = spec.sparse_ratio,
                         .threshold = spec.threshold,
                         .max_blocks = spec.max_blocks,
                         .scale = scale,
                         .seq_len = seq_len};
}

BlockSelectionStats selection_stats(const Tensor& totals) {
  BlockSelectionStats s;
  if (!totals.defined()) return s;
  MYRIAD_CHECK(totals.device().is_cpu() && totals.dtype() == DType::f64 && totals.numel() == 5,
               "selection_stats: 'totals' must be 5 host f64 values, got " << totals.describe());
  const Tensor t = totals.contiguous();
  const double* v = t.data<double>();
  s.query_blocks = static_cast<std::int64_t>(v[0]);
  s.kept_blocks = static_cast<std::int64_t>(v[1]);
  s.causal_blocks = static_cast<std::int64_t>(v[2]);
  s.selecting_rows = static_cast<std::int64_t>(v[3]);
  s.estimated_mass = v[4];
  return s;
}

void BlockSelectionStats::add(const BlockSelectionStats& other) {
  query_blocks += other.query_blocks;
  kept_blocks += other.kept_blocks;
  causal_blocks += other.causal_blocks;
  selecting_rows += other.selecting_rows;
  estimated_mass += other.estimated_mass;
}

namespace {

using Wanted = std::function<bool(int64_t)>;

// Adds to *stats the query-block rows `wanted` picks, for `heads` = B * Hq (b, head) pairs: the
// rows, their listed key blocks (one shared row, or one per head) and the blocks dense causal
// attention would read; for the per-head selection also its selecting rows (qb >= 1).
void count_rows(const BlockLayout& layout, int64_t heads, bool selecting, const Wanted& wanted,
                BlockSelectionStats* stats) {
  if (stats == nullptr) return;
  for (int64_t qb = 0; qb < layout.query_blocks; ++qb) {
    if (!wanted(qb)) continue;
    stats->query_blocks += heads;
    stats->causal_blocks += heads * (qb + 1);
    for (int64_t set = 0; set < layout.sets; ++set) {
      stats->kept_blocks += (layout.sets == 1 ? heads : 1) * static_cast<int64_t>(layout.row(set, qb).size());
    }
    if (selecting && qb > 0) stats->selecting_rows += heads;
  }
}

void check_f32(const Tensor& q, const Tensor& k) {
  MYRIAD_CHECK(q.dtype() == DType::f32 && k.dtype() == DType::f32 && q.device() == k.device(),
               "attention_layout: the selection reads f32 q and k on one device, got " << q.describe() << " and "
                                                                                       << k.describe());
}

}  // namespace

SelectedBlocks selected_blocks(const AttentionSpec& spec, const Tensor& q, const Tensor& k, float scale,
                               const ContextParallel& cp, Tensor& totals) {
  MYRIAD_CHECK(spec.selects(), "selected_blocks: model.attention does not select (sparse_ratio 0)");
  check_f32(q, k);
  const ops::Placement p = ops::placement_of(q, "selected_blocks");
  const int64_t B = q.size(0), Hq = q.size(1), Hkv = k.size(1), D = q.size(3), local = q.size(2);
  const int n = cp.size();
  const int64_t bs = spec.block_size, T = local * n;
  BlockSelectArgs args = select_args(spec, scale, T);
  Tensor qbar = means_of(q, bs), kbar = means_of(k, bs);
  if (n > 1) {
    const int64_t half = local / 2;
    MYRIAD_CHECK(half % bs == 0,
                 "attention_layout: chunks of " << half << " positions are not a multiple of the block size " << bs);
    const int64_t chunk_blocks = half / bs, nb = T / bs;
    args.chunk_blocks = chunk_blocks;
    args.chunk0 = cp.chunk_index(0);
    args.chunk1 = cp.chunk_index(1);
    // Every rank's summaries of its two chunks, gathered (on their device, stream-ordered), then
    // put in global block order.
    auto gathered = [&](const Tensor& local_means, int64_t H) {
      Tensor all = p.empty({n, B, H, 2 * chunk_blocks, D});
      Tensor flat_in = local_means.view({local_means.numel()}), flat_out = all.view({all.numel()});
      cp.all_gather(flat_in, flat_out);
      Tensor global = p.empty({B, H, nb, D});
      for (int owner = 0; owner < n; ++owner) {
        for (int c = 0; c < 2; ++c) {
          const int64_t chunk = c == 0 ? owner : 2 * n - 1 - owner;
          Tensor dst = global.slice(2, chunk * chunk_blocks, (chunk + 1) * chunk_blocks);
          copy(all.select(0, owner).slice(2, c * chunk_blocks, (c + 1) * chunk_blocks), dst);
        }
      }
      return global;
    };
    qbar = gathered(qbar, Hq);
    kbar = gathered(kbar, Hkv);
  }
  SelectedBlocks selected = empty_selected_blocks(args, B * Hq, qbar.size(2), qbar);
  select_blocks(args, qbar, kbar, selected, totals);
  return selected;
}

BlockLayout attention_layout(const AttentionSpec& spec, const Tensor& q, const Tensor& k, float scale,
                             BlockSelectionStats* stats) {
  return attention_layout(spec, q, k, scale, serial_context_parallel(), stats);
}

BlockLayout attention_layout(const AttentionSpec& spec, const Tensor& q, const Tensor& k, float scale,
                             const ContextParallel& cp, BlockSelectionStats* stats) {
  MYRIAD_CHECK(spec.block_sparse(), "attention_layout: model.attention.kind is dense");
  const int64_t B = q.size(0), Hq = q.size(1), local = q.size(2);
  const int n = cp.size();
  const int64_t bs = spec.block_size, T = local * n;
  if (!spec.selects()) {
    BlockLayout layout = fixed_block_layout(spec.fixed, T, bs);
    if (n == 1) {
      count_rows(
          layout, B * Hq, false, [](int64_t) { return true; }, stats);
      return layout;
    }
    const int64_t half = local / 2;
    MYRIAD_CHECK(half % bs == 0,
                 "attention_layout: chunks of " << half << " positions are not a multiple of the block size " << bs);
    const int64_t chunk_blocks = half / bs;
    const Wanted mine = [&](int64_t qb) {  // query block qb lies in one of this rank's two chunks
      const int64_t chunk = qb / chunk_blocks;
      return chunk == cp.chunk_index(0) || chunk == cp.chunk_index(1);
    };
    count_rows(layout, B * Hq, false, mine, stats);
    return layout;
  }
  MYRIAD_CHECK(q.device().is_cpu() && k.device().is_cpu(), "attention_layout: the host layout reads host q and k, got "
                                                               << q.describe() << " and " << k.describe()
                                                               << " (use selected_blocks on a device)");
  Tensor totals = Tensor::zeros({5}, DType::f64);
  const SelectedBlocks selected = selected_blocks(spec, q, k, scale, cp, totals);
  if (stats != nullptr) stats->add(selection_stats(totals));
  return compact_layout(selected);
}

}  // namespace myriad::nn
