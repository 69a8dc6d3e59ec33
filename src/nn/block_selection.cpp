// Block-sparse layouts: the fixed pattern, or the per-head selection (nn/block_selection.h).
#include "myriad/nn/block_selection.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "myriad/core/error.h"
#include "myriad/ops/matmul.h"

namespace myriad::nn {

namespace {

using std::int64_t;

constexpr int64_t kScoreChunk = 256;  // query blocks scored per matmul

// (B, H, blocks, D) means of the rows of each block of a (B, H, T, D) view; float64 sums in row
// order, so the result is the same whatever the threads (and whatever the cp split: a block never
// straddles two chunks).
Tensor block_means(const Tensor& x, int64_t block_size) {
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3), blocks = blocks_covering(T, block_size);
  Tensor out = Tensor::zeros({B, H, blocks, D});
  float* o = out.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < B * H * blocks; ++n) {
    const int64_t b = n / (H * blocks), h = n / blocks % H, blk = n % blocks;
    const int64_t t0 = blk * block_size, t1 = std::min(T, t0 + block_size);
    std::vector<double> sum(static_cast<std::size_t>(D), 0.0);
    for (int64_t t = t0; t < t1; ++t) {
      const float* row = x.data<float>() + b * x.stride(0) + h * x.stride(1) + t * x.stride(2);
      for (int64_t d = 0; d < D; ++d) sum[static_cast<std::size_t>(d)] += row[d];
    }
    for (int64_t d = 0; d < D; ++d) o[n * D + d] = static_cast<float>(sum[static_cast<std::size_t>(d)] / (t1 - t0));
  }
  return out;
}

// The kept past blocks of one selecting row, given its scores against blocks [0, qb).
struct RowChoice {
  std::vector<std::int32_t> blocks;  // ascending, with the diagonal block
  double mass = 0.0;                 // estimated share of the kept past blocks
};

RowChoice choose_blocks(const AttentionSpec& spec, int64_t qb, const float* scores, int64_t T) {
  const int64_t bs = spec.block_size;
  std::vector<double> w(static_cast<std::size_t>(qb));
  double top = -INFINITY;
  for (int64_t kb = 0; kb < qb; ++kb) {
    const int64_t rows = std::min(T, kb * bs + bs) - kb * bs;
    w[static_cast<std::size_t>(kb)] = static_cast<double>(scores[kb]) + std::log(static_cast<double>(rows));
    top = std::max(top, w[static_cast<std::size_t>(kb)]);
  }
  double total = 0.0;
  for (double& x : w) total += (x = std::exp(x - top));
  double heaviest = 0.0;
  for (double& x : w) heaviest = std::max(heaviest, x /= total);
  RowChoice choice;
  std::vector<std::int32_t> candidates;
  for (int64_t kb = 0; kb <= qb; ++kb) {
    if (in_fixed_pattern(spec.fixed, qb, kb)) {
      choice.blocks.push_back(static_cast<std::int32_t>(kb));
      if (kb < qb) choice.mass += w[static_cast<std::size_t>(kb)];
    } else {
      candidates.push_back(static_cast<std::int32_t>(kb));
    }
  }
  const auto heavier = [&w](std::int32_t a, std::int32_t b) {
    const double wa = w[static_cast<std::size_t>(a)], wb = w[static_cast<std::size_t>(b)];
    return wa > wb || (wa == wb && a < b);
  };
  const std::size_t cap =
      spec.max_blocks > 0 ? std::min<std::size_t>(candidates.size(), spec.max_blocks) : candidates.size();
  std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(cap), candidates.end(),
                    heavier);
  for (std::size_t n = 0; n < cap; ++n) {
    const double weight = w[static_cast<std::size_t>(candidates[n])];
    if (choice.mass >= spec.sparse_ratio || weight < spec.threshold * heaviest) break;
    choice.blocks.push_back(candidates[n]);
    choice.mass += weight;
  }
  std::sort(choice.blocks.begin(), choice.blocks.end());
  return choice;
}

}  // namespace

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

void check_host_f32(const Tensor& q, const Tensor& k) {
  MYRIAD_CHECK(
      q.device().is_cpu() && k.device().is_cpu() && q.dtype() == DType::f32 && k.dtype() == DType::f32,
      "attention_layout: the selection reads host f32 q and k, got " << q.describe() << " and " << k.describe());
}

// The per-head selection from the whole sequence's summaries qbar (B, Hq, nb, D) and kbar
// (B, Hkv, nb, D) for the query blocks `wanted` says (the others get empty rows); scores are
// computed in the same chunks whatever is wanted, so every rank and layout chooses identically.
BlockLayout select_from_means(const AttentionSpec& spec, const Tensor& qbar, const Tensor& kbar, int64_t T, float scale,
                              const Wanted& wanted, BlockSelectionStats* stats) {
  const int64_t B = qbar.size(0), Hq = qbar.size(1), nb = qbar.size(2), Hkv = kbar.size(1);
  const int64_t group = Hq / Hkv;
  std::vector<std::vector<std::int32_t>> rows(static_cast<std::size_t>(B * Hq * nb));
  std::vector<double> mass(static_cast<std::size_t>(B * Hq * nb), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      const Tensor keys = kbar.select(0, b).select(0, h / group);
      if (wanted(0)) rows[static_cast<std::size_t>((b * Hq + h) * nb)] = {0};
      // Query block qb is scored with the summary of block qb - 1: rows [first - 1, last - 1).
      for (int64_t first = 1; first < nb; first += kScoreChunk) {
        const int64_t last = std::min(nb, first + kScoreChunk);
        bool any = false;
        for (int64_t qb = first; qb < last && !any; ++qb) any = wanted(qb);
        if (!any) continue;
        const Tensor queries = qbar.select(0, b).select(0, h).slice(0, first - 1, last - 1);
        Tensor scores = Tensor::empty({last - first, nb});
        matmul_forward(MatmulArgs{.transpose_b = true, .alpha = scale}, queries, keys, scores);
        const float* s = scores.data<float>();
#pragma omp parallel for schedule(dynamic, 8)
        for (int64_t qb = first; qb < last; ++qb) {
          if (!wanted(qb)) continue;
          RowChoice choice = choose_blocks(spec, qb, s + (qb - first) * nb, T);
          const auto r = static_cast<std::size_t>((b * Hq + h) * nb + qb);
          rows[r] = std::move(choice.blocks);
          mass[r] = choice.mass;
        }
      }
    }
  }
  BlockLayout layout;
  layout.block_size = spec.block_size;
  layout.query_blocks = nb;
  layout.sets = B * Hq;
  layout.row_begin.reserve(rows.size() + 1);
  for (const auto& row : rows) {
    layout.key_blocks.insert(layout.key_blocks.end(), row.begin(), row.end());
    layout.row_begin.push_back(layout.kept_blocks());
  }
  count_rows(layout, B * Hq, true, wanted, stats);
  if (stats != nullptr) {
    for (double m : mass) stats->estimated_mass += m;
  }
  return layout;
}

}  // namespace

BlockLayout attention_layout(const AttentionSpec& spec, const Tensor& q, const Tensor& k, float scale,
                             BlockSelectionStats* stats) {
  MYRIAD_CHECK(spec.block_sparse(), "attention_layout: model.attention.kind is dense");
  const int64_t T = q.size(2), bs = spec.block_size;
  const Wanted every = [](int64_t) { return true; };
  if (!spec.selects()) {
    BlockLayout layout = fixed_block_layout(spec.fixed, T, bs);
    count_rows(layout, q.size(0) * q.size(1), false, every, stats);
    return layout;
  }
  check_host_f32(q, k);
  return select_from_means(spec, block_means(q, bs), block_means(k, bs), T, scale, every, stats);
}

BlockLayout attention_layout(const AttentionSpec& spec, const Tensor& q, const Tensor& k, float scale,
                             const ContextParallel& cp, BlockSelectionStats* stats) {
  if (cp.size() == 1) return attention_layout(spec, q, k, scale, stats);
  MYRIAD_CHECK(spec.block_sparse(), "attention_layout: model.attention.kind is dense");
  const int64_t B = q.size(0), Hq = q.size(1), Hkv = k.size(1), D = q.size(3), local = q.size(2);
  const int n = cp.size();
  const int64_t bs = spec.block_size, T = local * n, half = local / 2;
  MYRIAD_CHECK(half % bs == 0,
               "attention_layout: chunks of " << half << " positions are not a multiple of the block size " << bs);
  const int64_t chunk_blocks = half / bs, nb = T / bs;
  const Wanted mine = [&](int64_t qb) {  // query block qb lies in one of this rank's two chunks
    const int64_t chunk = qb / chunk_blocks;
    return chunk == cp.chunk_index(0) || chunk == cp.chunk_index(1);
  };
  if (!spec.selects()) {
    BlockLayout layout = fixed_block_layout(spec.fixed, T, bs);
    count_rows(layout, B * Hq, false, mine, stats);
    return layout;
  }
  check_host_f32(q, k);
  // Every rank's summaries of its two chunks, gathered, then put in global block order.
  auto gathered = [&](const Tensor& local_means, int64_t H) {
    Tensor all = Tensor::empty({n, B, H, 2 * chunk_blocks, D});
    Tensor flat_in = local_means.view({local_means.numel()}), flat_out = all.view({all.numel()});
    cp.all_gather(flat_in, flat_out);
    Tensor global = Tensor::empty({B, H, nb, D});
    for (int owner = 0; owner < n; ++owner) {
      for (int c = 0; c < 2; ++c) {
        const int64_t chunk = c == 0 ? owner : 2 * n - 1 - owner;
        Tensor dst = global.slice(2, chunk * chunk_blocks, (chunk + 1) * chunk_blocks);
        dst.copy_from(all.select(0, owner).slice(2, c * chunk_blocks, (c + 1) * chunk_blocks));
      }
    }
    return global;
  };
  const Tensor qbar = gathered(block_means(q, bs), Hq), kbar = gathered(block_means(k, bs), Hkv);
  return select_from_means(spec, qbar, kbar, T, scale, mine, stats);
}

}  // namespace myriad::nn
