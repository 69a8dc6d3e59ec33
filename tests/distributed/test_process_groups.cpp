// ProcessGroups without MPI: a world of one (every group a loopback named after its axis) and
// the layout check against the world's size.
#include <gtest/gtest.h>

#include "myriad/distributed/loopback_communicator.h"
#include "myriad/distributed/process_groups.h"
#include "test_helpers.h"

namespace myriad::distributed {
namespace {

TEST(ProcessGroups, SingleIsAWorldOfOneWithLoopbackGroups) {
  ProcessGroups groups = ProcessGroups::single();
  EXPECT_EQ(groups.rank(), 0);
  EXPECT_EQ(groups.grid().world_size(), 1);
  EXPECT_EQ(groups.world().name(), "world");
  for (Axis axis : kAxes) {
    EXPECT_EQ(groups.group(axis).name(), axis_name(axis));
    EXPECT_EQ(groups.group(axis).size(), 1);
  }
  Tensor t = Tensor::full({4}, 2.0);
  groups.group(Axis::dp).all_reduce(t);
  EXPECT_EQ(t.get({3}), 2.0);
  const auto stats = groups.stats();
  ASSERT_EQ(stats.size(), 6u);
  EXPECT_EQ(stats[0].first, "world");
  EXPECT_EQ(stats[4].first, "dp");
  EXPECT_EQ(stats[4].second[CommOp::all_reduce].calls, 1);
  EXPECT_EQ(stats[1].second.total().calls, 0);
}

TEST(ProcessGroups, LayoutMustMatchTheWorld) {
  myriad::testing::expect_error_naming(
      [] { ProcessGroups(GridShape{.tp = 2}, std::make_unique<LoopbackCommunicator>()); },
      {"tp 2 x cp 1 x dp 1 x pp 1 = 2 ranks, but the world has 1"});
  EXPECT_THROW(ProcessGroups(GridShape{}, nullptr), Error);
}

TEST(ProcessGroups, IsMovable) {
  ProcessGroups a = ProcessGroups::single();
  ProcessGroups b = std::move(a);
  EXPECT_EQ(b.world().size(), 1);
  a = std::move(b);
  EXPECT_EQ(a.group(Axis::tp).name(), "tp");
}

}  // namespace
}  // namespace myriad::distributed
