// RankGrid on worked examples (no MPI): coordinates, groups, pipeline and ring neighbours, and
// the layout error that names every factor.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>

#include "myriad/core/error.h"
#include "myriad/distributed/rank_grid.h"

namespace myriad::distributed {
namespace {

// 16 ranks: tp 2, dp 4, pp 2. rank = tp + 2 * (dp + 4 * pp).
RankGrid example() { return RankGrid(GridShape{.tp = 2, .dp = 4, .pp = 2}, 16); }

TEST(RankGrid, WorkedExampleCoordinates) {
  RankGrid grid = example();
  GridCoord c = grid.coords(13);  // 13 = 1 + 2 * (2 + 4 * 1)
  EXPECT_EQ(c[Axis::tp], 1);
  EXPECT_EQ(c[Axis::dp], 2);
  EXPECT_EQ(c[Axis::pp], 1);
  EXPECT_EQ(c[Axis::cp], 0);
  EXPECT_EQ(grid.rank_of(c), 13);
  EXPECT_EQ(grid.describe(13), "rank 13 (tp 1, cp 0, ep 0, dp 2, pp 1)");
  for (int r = 0; r < 16; ++r) EXPECT_EQ(grid.rank_of(grid.coords(r)), r);
}

TEST(RankGrid, WorkedExampleGroupsAndNeighbours) {
  RankGrid grid = example();
  EXPECT_EQ(grid.group(Axis::tp, 5), (std::vector<int>{4, 5}));  // neighbours share a node
  EXPECT_EQ(grid.group(Axis::dp, 5), (std::vector<int>{1, 3, 5, 7}));
  EXPECT_EQ(grid.group(Axis::pp, 5), (std::vector<int>{5, 13}));
  EXPECT_EQ(grid.group(Axis::cp, 5), (std::vector<int>{5}));
  EXPECT_EQ(grid.pipeline_next(5), 13);
  EXPECT_EQ(grid.pipeline_prev(5), -1);
  EXPECT_EQ(grid.pipeline_prev(13), 5);
  EXPECT_EQ(grid.pipeline_next(13), -1);
  EXPECT_EQ(grid.ring_next(Axis::dp, 7), 1);  // wraps around
  EXPECT_EQ(grid.ring_prev(Axis::dp, 1), 7);
  EXPECT_EQ(grid.ring_next(Axis::tp, 4), 5);
}

TEST(RankGrid, GroupsPartitionTheWorldAndIdsAreConsistent) {
  RankGrid grid(GridShape{.tp = 2, .cp = 2, .ep = 1, .dp = 3, .pp = 2}, 24);
  for (Axis axis : kAxes) {
    std::set<int> ids;
    for (int r = 0; r < 24; ++r) {
      std::vector<int> members = grid.group(axis, r);
      EXPECT_EQ(static_cast<int>(members.size()), grid.size(axis));
      EXPECT_NE(std::find(members.begin(), members.end(), r), members.end());
      for (int m : members) EXPECT_EQ(grid.group_id(axis, m), grid.group_id(axis, r)) << axis_name(axis);
      ids.insert(grid.group_id(axis, r));
    }
    EXPECT_EQ(static_cast<int>(ids.size()), 24 / grid.size(axis)) << axis_name(axis);
    EXPECT_EQ(*ids.rbegin(), 24 / grid.size(axis) - 1);
  }
}

// 16 ranks: tp 2, dp 8 with ep 4 inside it. Expert groups are consecutive replicas (dp 0-3, 4-7);
// the ranks holding the same experts are dp e and e + 4.
TEST(RankGrid, ExpertParallelGroupsLiveInsideDataParallelism) {
  RankGrid grid(GridShape{.tp = 2, .ep = 4, .dp = 8}, 16);
  GridCoord c = grid.coords(13);  // tp 1, dp 6
  EXPECT_EQ(c[Axis::dp], 6);
  EXPECT_EQ(c[Axis::ep], 2);
  EXPECT_EQ(grid.describe(13), "rank 13 (tp 1, cp 0, ep 2, dp 6, pp 0)");
  EXPECT_EQ(grid.group(Axis::ep, 13), (std::vector<int>{9, 11, 13, 15}));
  EXPECT_EQ(grid.group(Axis::dp, 13), (std::vector<int>{1, 3, 5, 7, 9, 11, 13, 15}));
  EXPECT_EQ(grid.expert_data_group(13), (std::vector<int>{5, 13}));
  EXPECT_EQ(grid.ring_next(Axis::ep, 15), 9);
  std::set<int> ep_ids, data_ids;
  for (int r = 0; r < 16; ++r) {
    EXPECT_EQ(grid.rank_of(grid.coords(r)), r);
    for (int m : grid.group(Axis::ep, r)) EXPECT_EQ(grid.group_id(Axis::ep, m), grid.group_id(Axis::ep, r));
    for (int m : grid.expert_data_group(r)) EXPECT_EQ(grid.expert_data_group_id(m), grid.expert_data_group_id(r));
    ep_ids.insert(grid.group_id(Axis::ep, r));
    data_ids.insert(grid.expert_data_group_id(r));
  }
  EXPECT_EQ(ep_ids.size(), 4u);    // 16 / 4
  EXPECT_EQ(data_ids.size(), 8u);  // 16 / 2
}

// Under context parallelism every cp rank of a replica routes chunks of the same sequences to the
// same experts: the expert-data group spans cp too (dp 4 / ep 2 replicas x cp 2 = 4 ranks).
TEST(RankGrid, ExpertDataGroupsSpanContextParallelRanks) {
  RankGrid grid(GridShape{.cp = 2, .ep = 2, .dp = 4}, 8);
  std::set<int> ids;
  for (int r = 0; r < 8; ++r) {
    const GridCoord c = grid.coords(r);
    std::vector<int> expected;
    for (int m = 0; m < 8; ++m) {
      const GridCoord o = grid.coords(m);
      if (o[Axis::dp] % 2 == c[Axis::dp] % 2) expected.push_back(m);
    }
    std::vector<int> members = grid.expert_data_group(r);
    EXPECT_EQ(std::set<int>(members.begin(), members.end()), std::set<int>(expected.begin(), expected.end()))
        << grid.describe(r);
    EXPECT_EQ(members.size(), 4u);
    for (int m : members) EXPECT_EQ(grid.expert_data_group_id(m), grid.expert_data_group_id(r));
    ids.insert(grid.expert_data_group_id(r));
  }
  EXPECT_EQ(ids.size(), 2u);
}

TEST(RankGrid, LayoutMismatchNamesEveryFactor) {
  try {
    RankGrid(GridShape{.tp = 2, .dp = 3, .pp = 2}, 8);
    FAIL() << "mismatched layout accepted";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("tp 2 x cp 1 x dp 3 x pp 2 = 12 ranks, but the world has 8"), std::string::npos) << what;
  }
  EXPECT_THROW(RankGrid(GridShape{.tp = 0}, 0), Error);
  EXPECT_THROW(RankGrid(GridShape{.ep = 3, .dp = 4}, 4), Error);  // ep must divide dp
  EXPECT_THROW(example().coords(16), Error);
}

}  // namespace
}  // namespace myriad::distributed
