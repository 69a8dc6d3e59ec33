// ProcessGroups over MPI: for several layouts of the world, every axis group holds exactly the
// ranks RankGrid lists, numbered by their coordinate, and reduces only among them.
#include <gtest/gtest.h>

#include "mpi_test_support.h"
#include "myriad/distributed/process_groups.h"
#include "test_helpers.h"

namespace myriad::distributed {
namespace {

using myriad::testing::element;
using myriad::testing::make_world;

void check_layout(const GridShape& shape) {
  ProcessGroups groups(shape, make_world());
  const RankGrid& grid = groups.grid();
  const int rank = groups.rank();
  EXPECT_EQ(rank, myriad::testing::world_rank());
  for (Axis axis : kAxes) {
    SCOPED_TRACE(axis_name(axis));
    Communicator& group = groups.group(axis);
    EXPECT_EQ(group.name(), axis_name(axis));
    EXPECT_EQ(group.size(), grid.size(axis));
    EXPECT_EQ(group.rank(), grid.coords(rank)[axis]);
    // Sum of (world rank + 1) over the group = sum over the members RankGrid lists.
    Tensor t = Tensor::full({3}, rank + 1, DType::i64);
    group.all_reduce(t);
    std::int64_t expected = 0;
    for (int member : grid.group(axis, rank)) expected += member + 1;
    EXPECT_EQ(element(t, 2), expected);
  }
  const auto stats = groups.stats();
  ASSERT_EQ(stats.size(), 6u);
  EXPECT_EQ(stats[0].first, "world");
  EXPECT_EQ(stats[4].first, "dp");
  EXPECT_EQ(stats[4].second[CommOp::all_reduce].calls, 1);
}

TEST(MpiProcessGroups, GroupsMatchTheRankGrid) {
  const int world = myriad::testing::world_size();
  ASSERT_EQ(world, 4) << "registered for 4 ranks";
  check_layout(GridShape{.tp = 2, .dp = 2});
  check_layout(GridShape{.tp = 2, .pp = 2});
  check_layout(GridShape{.dp = 4});
  check_layout(GridShape{.cp = 2, .dp = 2});
  check_layout(GridShape{.ep = 2, .dp = 4});  // ep inside dp: groups {0, 1}, {2, 3}
  // The expert-data group: the ranks with the same dp % ep, reducing among themselves only.
  ProcessGroups groups(GridShape{.ep = 2, .dp = 4}, make_world());
  Communicator& expert_data = groups.expert_data();
  EXPECT_EQ(expert_data.name(), "edp");
  EXPECT_EQ(expert_data.size(), 2);
  const int rank = groups.rank();
  Tensor t = Tensor::full({1}, rank + 1, DType::i64);
  expert_data.all_reduce(t);
  std::int64_t expected = 0;
  for (int member : groups.grid().expert_data_group(rank)) expected += member + 1;
  EXPECT_EQ(element(t, 0), expected);
  EXPECT_EQ(expected, rank % 2 == 0 ? 1 + 3 : 2 + 4);
}

TEST(MpiProcessGroups, MismatchedLayoutThrowsOnEveryRank) {
  myriad::testing::expect_error_naming([] { ProcessGroups(GridShape{.tp = 3}, make_world()); },
                                       {"tp 3 x cp 1 x dp 1 x pp 1 = 3 ranks, but the world has 4"});
}

TEST(MpiProcessGroups, MovedGroupsKeepWorking) {
  ProcessGroups a(GridShape{.tp = 2, .dp = 2}, make_world());
  ProcessGroups b = std::move(a);
  Tensor t = Tensor::full({1}, 1, DType::i32);
  b.group(Axis::dp).all_reduce(t);
  EXPECT_EQ(element(t, 0), 2);
}

}  // namespace
}  // namespace myriad::distributed
