// Block selection ops (ops/block_selection.h) on the CPU against a float64 recomputation written
// here from the definition, on fresh random inputs: the block means (strided views, a short last
// block), the kept blocks of every row (fixed patterns, GQA, a cap, a threshold, the cp rows), the
// per-row mass, the padding and row offsets of the fixed-capacity layout and the totals (added to
// their start); ties to the lower block, NaN weights never kept; bad arguments named.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "myriad/ops/block_selection.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using namespace myriad::testing;

// The kept blocks and mass of one row by the definition, in float64 from the f32 means.
std::vector<std::int32_t> reference_row(const BlockSelectArgs& a, const std::vector<double>& qbar,
                                        const std::vector<double>& kbar, std::int64_t q_row, std::int64_t k_head,
                                        std::int64_t nb, std::int64_t D, std::int64_t qb, double* mass) {
  *mass = 0.0;
  if (qb == 0) return {0};
  std::vector<double> w(static_cast<std::size_t>(qb));
  for (std::int64_t kb = 0; kb < qb; ++kb) {
    double s = 0.0;
    for (std::int64_t d = 0; d < D; ++d) s += qbar[q_row * D + d] * kbar[(k_head * nb + kb) * D + d];
    const std::int64_t rows = std::min(a.seq_len, (kb + 1) * a.block_size) - kb * a.block_size;
    w[kb] = a.scale * s + std::log(static_cast<double>(rows));
  }
  const double top = *std::max_element(w.begin(), w.end());
  double total = 0.0;
  for (double& x : w) total += (x = std::exp(x - top));
  for (double& x : w) x /= total;
  const double heaviest = *std::max_element(w.begin(), w.end());
  std::vector<std::int32_t> kept, candidates;
  for (std::int64_t kb = 0; kb <= qb; ++kb) {
    if (in_fixed_pattern(a.fixed, qb, kb)) {
      kept.push_back(static_cast<std::int32_t>(kb));
      if (kb < qb) *mass += w[kb];
    } else {
      candidates.push_back(static_cast<std::int32_t>(kb));
    }
  }
  std::stable_sort(candidates.begin(), candidates.end(), [&](std::int32_t x, std::int32_t y) { return w[x] > w[y]; });
  const std::size_t cap = a.max_blocks > 0 ? std::min<std::size_t>(a.max_blocks, candidates.size()) : candidates.size();
  for (std::size_t n = 0; n < cap; ++n) {
    const double weight = w[candidates[n]];
    if (*mass >= a.sparse_ratio || weight < a.threshold * heaviest) break;
    kept.push_back(candidates[n]);
    *mass += weight;
  }
  std::sort(kept.begin(), kept.end());
  return kept;
}

struct Case {
  std::int64_t B, Hq, Hkv, T, D, block_size;
  FixedBlockPattern fixed;
  double sparse_ratio, threshold;
  std::int64_t max_blocks, chunk_blocks, chunk0, chunk1;
};

TEST(BlockSelectionOps, MatchesAFloat64ReferenceOnRandomInputs) {
  const std::uint64_t seed = fresh_seed();
  SCOPED_TRACE(::testing::Message() << "seed " << seed);
  for (const Case& c : {Case{2, 4, 2, 64, 16, 4, {.local_blocks = 1, .global_blocks = 1}, 0.6, 0.0, 3, 0, 0, 0},
                        Case{1, 3, 1, 61, 8, 4, {}, 0.9, 0.05, 0, 0, 0, 0},
                        Case{1, 2, 2, 128, 8, 8, {.local_blocks = 0, .stride_blocks = 3}, 0.5, 0.0, 2, 4, 0, 3},
                        Case{1, 2, 2, 40, 4, 8, {}, 1.0, 0.0, 8, 0, 0, 0}}) {
    SCOPED_TRACE(::testing::Message() << "T " << c.T << " bs " << c.block_size << " cap " << c.max_blocks);
    const std::int64_t nb = blocks_covering(c.T, c.block_size);
    // Strided (B, H, T, D) views: every other row of a (B, H, 2T, D) tensor.
    const Tensor q_rows = random_tensor({c.B, c.Hq, 2 * c.T, c.D}, seed, 1, -2.0f, 2.0f);
    const Tensor k_rows = random_tensor({c.B, c.Hkv, 2 * c.T, c.D}, seed, 2, -2.0f, 2.0f);
    const Tensor q = Tensor::from_storage(q_rows.storage(), {c.B, c.Hq, c.T, c.D},
                                          {q_rows.stride(0), q_rows.stride(1), 2 * c.D, 1}, 0, DType::f32);
    const Tensor k = Tensor::from_storage(k_rows.storage(), {c.B, c.Hkv, c.T, c.D},
                                          {k_rows.stride(0), k_rows.stride(1), 2 * c.D, 1}, 0, DType::f32);
    Tensor qbar = Tensor::empty({c.B, c.Hq, nb, c.D}), kbar = Tensor::empty({c.B, c.Hkv, nb, c.D});
    block_means(q, c.block_size, qbar);
    block_means(k, c.block_size, kbar);
    const std::vector<double> qv = to_f64(q), kv = to_f64(k);
    auto check_means = [&](const std::vector<double>& x, const Tensor& means, std::int64_t H) {
      for (std::int64_t bh = 0; bh < c.B * H; ++bh)
        for (std::int64_t blk = 0; blk < nb; ++blk)
          for (std::int64_t d = 0; d < c.D; ++d) {
            const std::int64_t t0 = blk * c.block_size, t1 = std::min(c.T, t0 + c.block_size);
            double sum = 0.0;
            for (std::int64_t t = t0; t < t1; ++t) sum += x[(bh * c.T + t) * c.D + d];
            ASSERT_EQ(means.data<float>()[(bh * nb + blk) * c.D + d], static_cast<float>(sum / (t1 - t0)));
          }
    };
    check_means(qv, qbar, c.Hq);
    check_means(kv, kbar, c.Hkv);
    const BlockSelectArgs args{.fixed = c.fixed,
                               .block_size = c.block_size,
                               .sparse_ratio = c.sparse_ratio,
                               .threshold = c.threshold,
                               .max_blocks = c.max_blocks,
                               .scale = 0.7f,
                               .seq_len = c.T,
                               .chunk_blocks = c.chunk_blocks,
                               .chunk0 = c.chunk0,
                               .chunk1 = c.chunk1};
    SelectedBlocks out = empty_selected_blocks(args, c.B * c.Hq, nb, qbar);
    Tensor totals = Tensor::zeros({5}, DType::f64);
    totals.data<double>()[4] = 0.25;
    select_blocks(args, qbar, kbar, out, totals);
    const std::vector<double> qb64 = to_f64(qbar), kb64 = to_f64(kbar);
    const std::int64_t cap = out.capacity, group = c.Hq / c.Hkv;
    double want_totals[5] = {0, 0, 0, 0, 0.25};
    for (std::int64_t r = 0; r < c.B * c.Hq * nb; ++r) {
      const std::int64_t qb = r % nb, set = r / nb, b = set / c.Hq, h = set % c.Hq;
      EXPECT_EQ(out.row_begin.data<std::int64_t>()[r], r * cap);
      std::vector<std::int32_t> want;
      double mass = 0.0;
      if (args.wanted(qb)) {
        want = reference_row(args, qb64, kb64, set * nb + std::max<std::int64_t>(qb - 1, 0), b * c.Hkv + h / group, nb,
                             c.D, qb, &mass);
        want_totals[0] += 1;
        want_totals[1] += static_cast<double>(want.size());
        want_totals[2] += static_cast<double>(qb + 1);
        want_totals[3] += qb > 0 ? 1 : 0;
        want_totals[4] += mass;
      }
      ASSERT_LE(static_cast<std::int64_t>(want.size()), cap) << "row " << r;
      const std::int32_t* row = out.key_blocks.data<std::int32_t>() + r * cap;
      ASSERT_EQ(out.counts.data<std::int32_t>()[r], static_cast<std::int32_t>(want.size())) << "row " << r;
      for (std::size_t n = 0; n < want.size(); ++n) EXPECT_EQ(row[n], want[n]) << "row " << r << " entry " << n;
      for (std::int64_t n = static_cast<std::int64_t>(want.size()); n < cap; ++n) EXPECT_EQ(row[n], nb) << "padding";
      EXPECT_NEAR(out.mass.data<double>()[r], mass, 1e-5) << "row " << r;
    }
    for (int i = 0; i < 5; ++i) EXPECT_NEAR(totals.data<double>()[i], want_totals[i], 1e-4) << "totals[" << i << "]";
  }
}

TEST(BlockSelectionOps, TiesGoToTheLowerBlockAndNaNIsNeverKept) {
  const std::int64_t nb = 6, D = 4;
  Tensor qbar = Tensor::full({1, 1, nb, D}, 0.5f), kbar = Tensor::full({1, 1, nb, D}, 1.0f);
  const BlockSelectArgs args{
      .fixed = {.local_blocks = 0}, .block_size = 4, .sparse_ratio = 1.0, .max_blocks = 2, .seq_len = nb * 4};
  SelectedBlocks out = empty_selected_blocks(args, 1, nb, qbar);
  Tensor none;
  select_blocks(args, qbar, kbar, out, none);
  const BlockLayout layout = compact_layout(out);
  EXPECT_EQ(std::vector<std::int32_t>(layout.row(0, 5).begin(), layout.row(0, 5).end()),
            (std::vector<std::int32_t>{0, 1, 5}));
  for (std::int64_t d = 0; d < D; ++d) kbar.data<float>()[2 * D + d] = std::numeric_limits<float>::quiet_NaN();
  select_blocks(args, qbar, kbar, out, none);
  const BlockLayout with_nan = compact_layout(out);
  for (std::int64_t qb = 3; qb < nb; ++qb) {
    for (const std::int32_t kb : with_nan.row(0, qb)) EXPECT_NE(kb, 2) << "query block " << qb;
  }
}

TEST(BlockSelectionOps, BadArgumentsAreNamed) {
  const BlockSelectArgs args{.block_size = 4, .sparse_ratio = 0.5, .seq_len = 16};
  Tensor qbar = Tensor::zeros({1, 2, 4, 4}), kbar = Tensor::zeros({1, 3, 4, 4}), none;
  SelectedBlocks out = empty_selected_blocks(args, 2, 4, qbar);
  expect_error_naming([&] { select_blocks(args, qbar, kbar, out, none); }, {"select_blocks", "kbar"});
  Tensor small = Tensor::zeros({1, 2, 3, 4});
  expect_error_naming([&] { block_means(Tensor::zeros({1, 2, 16, 4}), 4, small); }, {"block_means", "out"});
  const BlockSelectArgs longer{.block_size = 4, .sparse_ratio = 0.5, .seq_len = 40};
  expect_error_naming(
      [&] {
        select_blocks(longer, qbar, Tensor::zeros({1, 2, 4, 4}), out, none);
      },
      {"select_blocks", "seq_len"});
}

}  // namespace
}  // namespace myriad
