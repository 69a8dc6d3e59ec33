// ZeroLayout on worked examples (no MPI): buckets in backward order, owned chunks that partition
// every bucket across ranks, shard offsets, parameter segments, and the ZeRO memory formulas.
#include <gtest/gtest.h>

#include <numeric>

#include "myriad/parallel/zero_layout.h"
#include "myriad/parallel/data_parallel.h"
#include "example_units.h"
#include "test_helpers.h"

namespace myriad::parallel {
namespace {

using test_models::example_units;

TEST(ZeroLayout, BucketsCloseInBackwardOrderOnceFull) {
  ZeroLayout layout(example_units(), 70, 1, 0);
  // Backward: u4 (30) + u3 (40) = 70 closes; u2 + u1 = 80 closes; u0 alone.
  ASSERT_EQ(layout.buckets().size(), 3u);
  EXPECT_EQ(layout.buckets()[0].begin, 180);
  EXPECT_EQ(layout.buckets()[0].end, 250);
  EXPECT_EQ(layout.buckets()[0].first_unit, 3);
  EXPECT_EQ(layout.buckets()[0].last_unit, 4);
  EXPECT_EQ(layout.buckets()[1].begin, 100);
  EXPECT_EQ(layout.buckets()[1].end, 180);
  EXPECT_EQ(layout.buckets()[2].begin, 0);
  EXPECT_EQ(layout.buckets()[2].end, 100);
  EXPECT_EQ(layout.bucket_of_unit(4), 0);
  EXPECT_EQ(layout.bucket_of_unit(1), 1);
  EXPECT_EQ(layout.bucket_of_unit(0), 2);
  EXPECT_EQ(layout.shard_elements(), 250);  // one owner holds everything
}

TEST(ZeroLayout, ZeroBucketSizeMeansOneBucketAndOneMeansOnePerUnit) {
  ZeroLayout one(example_units(), 0, 1, 0);
  ASSERT_EQ(one.buckets().size(), 1u);
  EXPECT_EQ(one.buckets()[0].begin, 0);
  EXPECT_EQ(one.buckets()[0].end, 250);
  ZeroLayout per_unit(example_units(), 1, 1, 0);
  EXPECT_EQ(per_unit.buckets().size(), 5u);
}

TEST(ZeroLayout, OwnedChunksPartitionEveryBucketAcrossRanks) {
  for (int parts : {1, 2, 3, 4, 7}) {
    std::vector<int> owner(250, 0);
    std::int64_t shard_total = 0;
    for (int r = 0; r < parts; ++r) {
      ZeroLayout layout(example_units(), 70, parts, r);
      std::int64_t expected_offset = 0;
      for (const ZeroBucket& b : layout.buckets()) {
        EXPECT_EQ(b.shard_offset, expected_offset);
        expected_offset += b.owned.size();
        EXPECT_GE(b.owned.begin, b.begin);
        EXPECT_LE(b.owned.end, b.end);
        // Balanced: chunk sizes differ by at most one element across ranks.
        EXPECT_LE(b.owned.size(), (b.size() + parts - 1) / parts);
        EXPECT_GE(b.owned.size(), b.size() / parts);
        for (std::int64_t i = b.owned.begin; i < b.owned.end; ++i) ++owner[static_cast<std::size_t>(i)];
      }
      EXPECT_EQ(layout.shard_elements(), expected_offset);
      shard_total += layout.shard_elements();
    }
    EXPECT_EQ(shard_total, 250) << parts << " parts";
    for (int count : owner) ASSERT_EQ(count, 1) << "every element has exactly one owner at " << parts << " parts";
  }
}

TEST(ZeroLayout, SegmentsCutOwnedChunksAtParameterBoundariesAndSkipPadding) {
  // Parameters: [0, 90) (padding 90..100), [100, 130), [140, 170), [180, 250).
  std::vector<ParamSpan> params = {{0, 90}, {100, 30}, {140, 30}, {180, 70}};
  ZeroLayout layout(example_units(), 0, 2, 1);  // one bucket [0, 250); rank 1 owns [125, 250)
  std::vector<ZeroSegment> segments = layout.segments(params);
  ASSERT_EQ(segments.size(), 3u);
  EXPECT_EQ(segments[0].param, 1u);
  EXPECT_EQ(segments[0].begin, 125);
  EXPECT_EQ(segments[0].end, 130);
  EXPECT_EQ(segments[0].shard_position, 0);
  EXPECT_EQ(segments[1].param, 2u);
  EXPECT_EQ(segments[1].begin, 140);
  EXPECT_EQ(segments[1].shard_position, 15);
  EXPECT_EQ(segments[2].param, 3u);
  EXPECT_EQ(segments[2].end, 250);
  EXPECT_EQ(segments[2].shard_position, 55);
}

TEST(ZeroLayout, RejectsGapsAndBadShardIndex) {
  std::vector<nn::ParamUnit> units = example_units();
  units[2].begin += 1;
  testing::expect_error_naming([&] { ZeroLayout(units, 0, 1, 0); }, {"u2", "u1"});
  testing::expect_error_naming([&] { ZeroLayout(example_units(), 0, 2, 2); }, {"shard index 2"});
}

TEST(ZeroMemory, FormulasPerStage) {
  const std::int64_t psi = 1000, shard = 250;  // N = 4
  using parallel::DataParallel;
  auto s0 = DataParallel::formula(psi, shard, 0);
  EXPECT_EQ(s0.parameter_bytes, 4000);
  EXPECT_EQ(s0.gradient_bytes, 4000);
  EXPECT_EQ(s0.optimizer_bytes, 8000);
  auto s1 = DataParallel::formula(psi, shard, 1);
  EXPECT_EQ(s1.parameter_bytes, 4000);
  EXPECT_EQ(s1.gradient_bytes, 5000);  // full accumulation buffer + reduced shard
  EXPECT_EQ(s1.optimizer_bytes, 2000);
  auto s2 = DataParallel::formula(psi, shard, 2);
  EXPECT_EQ(s2.parameter_bytes, 4000);
  EXPECT_EQ(s2.gradient_bytes, 1000);
  EXPECT_EQ(s2.optimizer_bytes, 2000);
  auto s3 = DataParallel::formula(psi, shard, 3);
  EXPECT_EQ(s3.parameter_bytes, 1000);
  EXPECT_EQ(s3.gradient_bytes, 1000);
  EXPECT_EQ(s3.optimizer_bytes, 2000);
}

}  // namespace
}  // namespace myriad::parallel
