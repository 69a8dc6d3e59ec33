// Block-sparse layouts: the fixed pattern, or the per-head selection (nn/block_selection.h).
#include "myriad/nn/block_selection.h"

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "myriad/core/error.h"
#include "myriad/ops/matmul.h"

namespace myriad::nn {

namespace {

using std::int64_t;

constexpr int64_t kScoreChunk = 256;  // query blocks scored per matmul

// (heads, blocks, D) means of the rows of each block of each head of batch entry b of a
// (B, H, T, D) view; float64 sums in row order, so the result is the same whatever the threads.
Tensor block_means(const Tensor& x, int64_t b, int64_t block_size, int64_t blocks) {
  const int64_t H = x.size(1), T = x.size(2), D = x.size(3);
  Tensor out = Tensor::zeros({H, blocks, D});
  const float* base = x.data<float>() + b * x.stride(0);
  float* o = out.data<float>();
#pragma omp parallel for schedule(static)
  for (int64_t hb = 0; hb < H * blocks; ++hb) {
    const int64_t h = hb / blocks, blk = hb % blocks;
    const int64_t t0 = blk * block_size, t1 = std::min(T, t0 + block_size);
    std::vector<double> sum(static_cast<std::size_t>(D), 0.0);
    for (int64_t t = t0; t < t1; ++t) {
      const float* row = base + h * x.stride(1) + t * x.stride(2);
      for (int64_t d = 0; d < D; ++d) sum[static_cast<std::size_t>(d)] += row[d];
    }
    for (int64_t d = 0; d < D; ++d) o[hb * D + d] = static_cast<float>(sum[static_cast<std::size_t>(d)] / (t1 - t0));
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
  const std::size_t cap = spec.max_blocks > 0 ? std::min<std::size_t>(candidates.size(), spec.max_blocks)
                                              : candidates.size();
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

int64_t causal_blocks(int64_t query_blocks) { return query_blocks * (query_blocks + 1) / 2; }

}  // namespace

void BlockSelectionStats::add(const BlockSelectionStats& other) {
  query_blocks += other.query_blocks;
  kept_blocks += other.kept_blocks;
  causal_blocks += other.causal_blocks;
  selecting_rows += other.selecting_rows;
  estimated_mass += other.estimated_mass;
}

BlockLayout attention_layout(const AttentionSpec& spec, const Tensor& q, const Tensor& k, float scale,
                             BlockSelectionStats* stats) {
  MYRIAD_CHECK(spec.block_sparse(), "attention_layout: model.attention.kind is dense");
  const int64_t B = q.size(0), Hq = q.size(1), T = q.size(2), D = q.size(3), Hkv = k.size(1);
  const int64_t bs = spec.block_size, nb = blocks_covering(T, bs), group = Hq / Hkv;
  if (!spec.selects()) {
    BlockLayout layout = fixed_block_layout(spec.fixed, T, bs);
    if (stats != nullptr) {
      stats->query_blocks += B * Hq * nb;
      stats->kept_blocks += B * Hq * layout.kept_blocks();
      stats->causal_blocks += B * Hq * causal_blocks(nb);
    }
    return layout;
  }
  MYRIAD_CHECK(q.device().is_cpu() && k.device().is_cpu() && q.dtype() == DType::f32 && k.dtype() == DType::f32,
               "attention_layout: the selection reads host f32 q and k, got " << q.describe() << " and "
                                                                             << k.describe());
  std::vector<std::vector<std::int32_t>> rows(static_cast<std::size_t>(B * Hq * nb));
  std::vector<double> mass(static_cast<std::size_t>(B * Hq * nb), 0.0);
  for (int64_t b = 0; b < B; ++b) {
    const Tensor kbar = block_means(k, b, bs, nb), qbar = block_means(q, b, bs, nb);
    for (int64_t h = 0; h < Hq; ++h) {
      const Tensor keys = kbar.slice(0, h / group, h / group + 1).view({nb, D});
      rows[static_cast<std::size_t>((b * Hq + h) * nb)] = {0};
      // Query block qb is scored with the summary of block qb - 1: rows [first - 1, last - 1).
      for (int64_t first = 1; first < nb; first += kScoreChunk) {
        const int64_t last = std::min(nb, first + kScoreChunk);
        const Tensor queries = qbar.slice(0, h, h + 1).view({nb, D}).slice(0, first - 1, last - 1);
        Tensor scores = Tensor::empty({last - first, nb});
        matmul_forward(MatmulArgs{.transpose_b = true, .alpha = scale}, queries, keys, scores);
        const float* s = scores.data<float>();
#pragma omp parallel for schedule(dynamic, 8)
        for (int64_t qb = first; qb < last; ++qb) {
          RowChoice choice = choose_blocks(spec, qb, s + (qb - first) * nb, T);
          const auto r = static_cast<std::size_t>((b * Hq + h) * nb + qb);
          rows[r] = std::move(choice.blocks);
          mass[r] = choice.mass;
        }
      }
    }
  }
  BlockLayout layout;
  layout.block_size = bs;
  layout.query_blocks = nb;
  layout.sets = B * Hq;
  layout.row_begin.reserve(rows.size() + 1);
  for (const auto& row : rows) {
    layout.key_blocks.insert(layout.key_blocks.end(), row.begin(), row.end());
    layout.row_begin.push_back(layout.kept_blocks());
  }
  if (stats != nullptr) {
    stats->query_blocks += B * Hq * nb;
    stats->kept_blocks += layout.kept_blocks();
    stats->causal_blocks += B * Hq * causal_blocks(nb);
    stats->selecting_rows += B * Hq * (nb - 1);
    for (double m : mass) stats->estimated_mass += m;
  }
  return layout;
}

}  // namespace myriad::nn
