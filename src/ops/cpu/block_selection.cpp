// CPU block selection (ops/block_selection.h): the reference. Means are float64 sums in row order;
// scores are f32 matmuls in chunks of kScoreChunk query blocks (the chunks do not depend on which
// rows are wanted, so every rank and layout scores identically); a row's choice is a float64 pass
// in block order. These are the steps nn::attention_layout has always taken, so the host layouts
// are bit-identical to those before the op existed.
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "myriad/core/error.h"
#include "myriad/ops/block_selection.h"
#include "myriad/ops/matmul.h"

namespace myriad::cpu {

namespace {

using std::int64_t;

constexpr int64_t kScoreChunk = 256;  // query blocks scored per matmul

// a is heavier than b: larger weight, equal weights the lower block, NaN the lowest of all.
bool heavier(double wa, std::int32_t a, double wb, std::int32_t b) {
  if (std::isnan(wa) || std::isnan(wb)) return !std::isnan(wa) || (std::isnan(wb) && a < b);
  return wa > wb || (wa == wb && a < b);
}

// The kept blocks (ascending, with the diagonal) and kept past mass of selecting row qb >= 1, from
// its f32 scores against blocks [0, qb); writes the blocks to `keys`, returns their count.
int64_t choose_blocks(const BlockSelectArgs& args, int64_t qb, const float* scores, std::int32_t* keys, double* mass) {
  const int64_t bs = args.block_size, T = args.seq_len;
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
  std::vector<std::int32_t> blocks, candidates;
  double kept = 0.0;
  for (int64_t kb = 0; kb <= qb; ++kb) {
    if (in_fixed_pattern(args.fixed, qb, kb)) {
      blocks.push_back(static_cast<std::int32_t>(kb));
      if (kb < qb) kept += w[static_cast<std::size_t>(kb)];
    } else {
      candidates.push_back(static_cast<std::int32_t>(kb));
    }
  }
  const auto order = [&w](std::int32_t a, std::int32_t b) {
    return heavier(w[static_cast<std::size_t>(a)], a, w[static_cast<std::size_t>(b)], b);
  };
  const std::size_t cap =
      args.max_blocks > 0 ? std::min<std::size_t>(candidates.size(), args.max_blocks) : candidates.size();
  std::partial_sort(candidates.begin(), candidates.begin() + static_cast<std::ptrdiff_t>(cap), candidates.end(), order);
  for (std::size_t n = 0; n < cap; ++n) {
    const double weight = w[static_cast<std::size_t>(candidates[n])];
    if (std::isnan(weight) || kept >= args.sparse_ratio || weight < args.threshold * heaviest) break;
    blocks.push_back(candidates[n]);
    kept += weight;
  }
  std::sort(blocks.begin(), blocks.end());
  std::copy(blocks.begin(), blocks.end(), keys);
  *mass = kept;
  return static_cast<int64_t>(blocks.size());
}

}  // namespace

void block_means(const Tensor& x, int64_t block_size, Tensor& out) {
  const int64_t B = x.size(0), H = x.size(1), T = x.size(2), D = x.size(3), blocks = blocks_covering(T, block_size);
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
}

void select_blocks(const BlockSelectArgs& args, const Tensor& qbar, const Tensor& kbar, SelectedBlocks& out,
                   Tensor& totals) {
  const int64_t B = qbar.size(0), Hq = qbar.size(1), nb = qbar.size(2), Hkv = kbar.size(1);
  const int64_t group = Hq / Hkv, cap = out.capacity, rows = B * Hq * nb;
  std::int32_t* keys = out.key_blocks.data<std::int32_t>();
  std::int32_t* counts = out.counts.data<std::int32_t>();
  double* mass = out.mass.data<double>();
  std::int64_t* row_begin = out.row_begin.data<std::int64_t>();
  std::fill(keys, keys + rows * cap, static_cast<std::int32_t>(nb));
  std::fill(counts, counts + rows, 0);
  std::fill(mass, mass + rows, 0.0);
  for (int64_t r = 0; r <= rows; ++r) row_begin[r] = r * cap;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t h = 0; h < Hq; ++h) {
      const int64_t set = b * Hq + h;
      if (args.wanted(0)) {
        keys[set * nb * cap] = 0;
        counts[set * nb] = 1;
      }
      const Tensor k = kbar.select(0, b).select(0, h / group);
      // Query block qb is scored with the summary of block qb - 1: rows [first - 1, last - 1).
      for (int64_t first = 1; first < nb; first += kScoreChunk) {
        const int64_t last = std::min(nb, first + kScoreChunk);
        bool any = false;
        for (int64_t qb = first; qb < last && !any; ++qb) any = args.wanted(qb);
        if (!any) continue;
        const Tensor q = qbar.select(0, b).select(0, h).slice(0, first - 1, last - 1);
        Tensor scores = Tensor::empty({last - first, nb});
        myriad::matmul_forward(MatmulArgs{.transpose_b = true, .alpha = args.scale}, q, k, scores);
        const float* s = scores.data<float>();
#pragma omp parallel for schedule(dynamic, 8)
        for (int64_t qb = first; qb < last; ++qb) {
          if (!args.wanted(qb)) continue;
          const int64_t r = set * nb + qb;
          counts[r] =
              static_cast<std::int32_t>(choose_blocks(args, qb, s + (qb - first) * nb, keys + r * cap, mass + r));
        }
      }
    }
  }
  if (!totals.defined()) return;
  double stats[5] = {0.0, 0.0, 0.0, 0.0, 0.0};
  std::int64_t wanted_rows = 0, kept = 0, causal = 0, selecting = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t qb = r % nb;
    if (!args.wanted(qb)) continue;
    ++wanted_rows;
    kept += counts[r];
    causal += qb + 1;
    if (qb > 0) ++selecting;
  }
  for (int64_t r = 0; r < rows; ++r) stats[4] += mass[r];
  stats[0] = static_cast<double>(wanted_rows);
  stats[1] = static_cast<double>(kept);
  stats[2] = static_cast<double>(causal);
  stats[3] = static_cast<double>(selecting);
  double* t = totals.data<double>();
  for (int n = 0; n < 5; ++n) t[n] += stats[n];
}

}  // namespace myriad::cpu
