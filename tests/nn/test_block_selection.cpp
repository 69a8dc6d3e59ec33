// Block-sparse layouts (nn/block_selection.h) on constructed inputs whose block scores are known:
// the selection keeps exactly the blocks its rule names (share reaching sparse_ratio, max_blocks,
// threshold relative to the heaviest block, ties to the lower block, the fixed pattern always),
// per head, causal (a row never depends on its own block's queries or on later keys), and reports
// the estimated mass it kept; the fixed pattern reads nothing.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "myriad/nn/block_selection.h"

namespace myriad::nn {
namespace {

constexpr std::int64_t kBlock = 4, kBlocks = 8, kT = kBlock * kBlocks, kD = 2;

// Keys of block kb all (a[kb], 0); queries all (1, 0): with scale 1 the score of key block kb for
// every query block is a[kb] (blocks are full, so the log-size term cancels). Two heads: the
// second one's queries are (-1, 0).
struct Inputs {
  Tensor q = Tensor::zeros({1, 2, kT, kD});
  Tensor k = Tensor::zeros({1, 1, kT, kD});
};

Inputs inputs(const std::vector<float>& a) {
  Inputs in;
  for (std::int64_t t = 0; t < kT; ++t) {
    in.k.data<float>()[t * kD] = a[static_cast<std::size_t>(t / kBlock)];
    in.q.data<float>()[t * kD] = 1.0f;
    in.q.data<float>()[(kT + t) * kD] = -1.0f;
  }
  return in;
}

AttentionSpec selecting(double ratio) {
  AttentionSpec spec;
  spec.kind = AttentionKind::block_sparse;
  spec.block_size = kBlock;
  spec.fixed = {};  // the diagonal block only
  spec.sparse_ratio = ratio;
  spec.max_blocks = 0;
  return spec;
}

std::vector<std::int32_t> row(const BlockLayout& layout, std::int64_t set, std::int64_t qb) {
  const auto r = layout.row(set, qb);
  return {r.begin(), r.end()};
}

// Scores of query block 7 against blocks 0..6: weights exp(a) / sum = 0.619 (block 1), 0.227
// (block 4), 0.031 each for the other five.
const std::vector<float> kScores = {0, 3, 0, 0, 2, 0, 0, 0};

std::vector<std::int32_t> row7(const AttentionSpec& spec, const Inputs& in, BlockSelectionStats* stats = nullptr) {
  return row(attention_layout(spec, in.q, in.k, 1.0f, stats), 0, 7);
}

TEST(BlockSelection, KeepsTheHeaviestBlocksUntilTheRatio) {
  const Inputs in = inputs(kScores);
  EXPECT_EQ(row7(selecting(0.5), in), (std::vector<std::int32_t>{1, 7}));
  EXPECT_EQ(row7(selecting(0.8), in), (std::vector<std::int32_t>{1, 4, 7}));
  // 0.846 < 0.9: then the light blocks, ties broken towards the lower block: 0 (0.877), 2 (0.908).
  EXPECT_EQ(row7(selecting(0.9), in), (std::vector<std::int32_t>{0, 1, 2, 4, 7}));
}

TEST(BlockSelection, MaxBlocksAndThresholdStopIt) {
  const Inputs in = inputs(kScores);
  AttentionSpec spec = selecting(0.9);
  spec.max_blocks = 1;
  EXPECT_EQ(row7(spec, in), (std::vector<std::int32_t>{1, 7}));
  spec.max_blocks = 0;
  spec.threshold = 0.1;  // 0.1 x 0.619: the 0.031 blocks are skipped
  EXPECT_EQ(row7(spec, in), (std::vector<std::int32_t>{1, 4, 7}));
}

TEST(BlockSelection, FixedBlocksCountTowardsTheRatio) {
  const Inputs in = inputs(kScores);
  AttentionSpec spec = selecting(0.6);
  spec.fixed.local_blocks = 1;  // block 6 (0.031) is always read: 0.031 + 0.619 >= 0.6
  EXPECT_EQ(row7(spec, in), (std::vector<std::int32_t>{1, 6, 7}));
  spec.fixed.global_blocks = 2;  // blocks 0, 1 (0.650) already reach 0.6
  EXPECT_EQ(row7(spec, in), (std::vector<std::int32_t>{0, 1, 6, 7}));
}

TEST(BlockSelection, EveryHeadChoosesForItself) {
  const Inputs in = inputs(kScores);
  const BlockLayout layout = attention_layout(selecting(0.5), in.q, in.k, 1.0f, nullptr);
  ASSERT_EQ(layout.sets, 2);
  EXPECT_EQ(row(layout, 0, 7), (std::vector<std::int32_t>{1, 7}));
  // Head 1's queries are negated: the zero-score blocks weigh exp(0) against exp(-3), exp(-2);
  // five equal blocks of 0.193 each: three of them (the lowest) reach 0.5.
  EXPECT_EQ(row(layout, 1, 7), (std::vector<std::int32_t>{0, 2, 3, 7}));
  EXPECT_EQ(row(layout, 0, 0), (std::vector<std::int32_t>{0}));
}

TEST(BlockSelection, RowsDependOnlyOnThePreviousQueriesAndEarlierKeys) {
  Inputs in = inputs(kScores);
  const BlockLayout before = attention_layout(selecting(0.8), in.q, in.k, 1.0f, nullptr);
  // Query block 7's own queries and keys of block 7 change: row 7 must not.
  for (std::int64_t t = 7 * kBlock; t < kT; ++t) {
    in.q.data<float>()[t * kD + 1] = 50.0f;
    in.k.data<float>()[t * kD] = 9.0f;
  }
  const BlockLayout after = attention_layout(selecting(0.8), in.q, in.k, 1.0f, nullptr);
  EXPECT_EQ(row(after, 0, 7), row(before, 0, 7));
  // Block 6's queries choose for block 7: pointing them at key block 4 changes row 7.
  for (std::int64_t t = 6 * kBlock; t < 7 * kBlock; ++t) in.q.data<float>()[t * kD] = -1.0f;
  const BlockLayout moved = attention_layout(selecting(0.8), in.q, in.k, 1.0f, nullptr);
  EXPECT_NE(row(moved, 0, 7), row(before, 0, 7));
}

TEST(BlockSelection, ReportsWhatItKept) {
  const Inputs in = inputs(kScores);
  BlockSelectionStats stats;
  const BlockLayout layout = attention_layout(selecting(0.5), in.q, in.k, 1.0f, &stats);
  EXPECT_EQ(stats.query_blocks, 2 * kBlocks);
  EXPECT_EQ(stats.kept_blocks, layout.kept_blocks());
  EXPECT_EQ(stats.causal_blocks, 2 * kBlocks * (kBlocks + 1) / 2);
  EXPECT_EQ(stats.selecting_rows, 2 * (kBlocks - 1));
  // Row 7 of head 0 kept 0.619 of its estimated mass; every selecting row kept >= 0.5.
  EXPECT_GE(stats.estimated_mass, 0.5 * static_cast<double>(stats.selecting_rows));
  const double e3 = std::exp(3.0), e2 = std::exp(2.0);
  EXPECT_NEAR(e3 / (e3 + e2 + 5.0), 0.619, 1e-3);  // the weight the comments above quote
}

TEST(BlockSelection, TheFixedPatternIsSharedAndCounted) {
  AttentionSpec spec;
  spec.kind = AttentionKind::block_sparse;
  spec.block_size = kBlock;
  spec.fixed = {.local_blocks = 1, .global_blocks = 1};
  const Inputs in = inputs(kScores);
  BlockSelectionStats stats;
  const BlockLayout layout = attention_layout(spec, in.q, in.k, 1.0f, &stats);
  EXPECT_EQ(layout.sets, 1);
  EXPECT_EQ(row(layout, 0, 7), (std::vector<std::int32_t>{0, 6, 7}));
  EXPECT_EQ(stats.kept_blocks, 2 * layout.kept_blocks());
  EXPECT_EQ(stats.selecting_rows, 0);
}

}  // namespace
}  // namespace myriad::nn
