// Node layout: which groups are node-regular, and what parallel.dp_reduce settles to for them.
#include <gtest/gtest.h>

#include "myriad/distributed/loopback_communicator.h"
#include "myriad/distributed/node_layout.h"
#include "test_helpers.h"

namespace myriad::distributed {
namespace {

TEST(NodeLayout, RegularGroupsGiveNodesAndMembersPerNode) {
  auto g = group_by_node({0, 0, 1, 1, 2, 2});
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->nodes, 3);
  EXPECT_EQ(g->per_node, 2);
  g = group_by_node({4, 7, 9});
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->nodes, 3);
  EXPECT_EQ(g->per_node, 1);
  g = group_by_node({5, 5, 5});
  ASSERT_TRUE(g.has_value());
  EXPECT_EQ(g->nodes, 1);
  EXPECT_EQ(g->per_node, 3);
}

TEST(NodeLayout, IrregularGroupsAreExplained) {
  std::string why;
  EXPECT_FALSE(group_by_node({0, 0, 0, 1}, &why).has_value());
  EXPECT_NE(why.find("node 0 holds 3 members of the group but node 1 holds 1"), std::string::npos) << why;
  EXPECT_FALSE(group_by_node({0, 1, 0, 1}, &why).has_value());
  EXPECT_NE(why.find("members on node 0 are not consecutive"), std::string::npos) << why;
}

TEST(NodeLayout, AutomaticPicksHierarchicalOnlyWhenItHelps) {
  NodeGrouping grouping;
  EXPECT_EQ(choose_reduction(ReductionAlgorithm::automatic, {0, 0, 1, 1}, "dp", &grouping),
            ReductionAlgorithm::hierarchical);
  EXPECT_EQ(grouping.nodes, 2);
  EXPECT_EQ(grouping.per_node, 2);
  EXPECT_EQ(choose_reduction(ReductionAlgorithm::automatic, {0, 0, 0, 0}, "dp", &grouping),
            ReductionAlgorithm::ring);  // one node
  EXPECT_EQ(choose_reduction(ReductionAlgorithm::automatic, {0, 1, 2, 3}, "dp", &grouping),
            ReductionAlgorithm::ring);  // one per node
  EXPECT_EQ(choose_reduction(ReductionAlgorithm::automatic, {0, 0, 0, 1}, "dp", &grouping),
            ReductionAlgorithm::ring);  // irregular
  EXPECT_EQ(choose_reduction(ReductionAlgorithm::tree, {0, 0, 1, 1}, "dp", &grouping), ReductionAlgorithm::tree);
  EXPECT_EQ(choose_reduction(ReductionAlgorithm::ring, {0, 0, 1, 1}, "dp", &grouping), ReductionAlgorithm::ring);
}

TEST(NodeLayout, ExplicitHierarchicalRefusesAnIrregularGroupNamingIt) {
  myriad::testing::expect_error_naming(
      [] {
        choose_reduction(ReductionAlgorithm::hierarchical, {0, 0, 0, 1}, "dcp", nullptr);
      },
      {"parallel.dp_reduce hierarchical", "group 'dcp'", "node 0 holds 3 members", "parallel.ranks_per_node"});
}

TEST(NodeLayout, SimulatedNodesNumberConsecutiveRanks) {
  LoopbackCommunicator world;
  EXPECT_EQ(node_of_each_rank(world, 2), std::vector<int>{0});
  EXPECT_EQ(node_of_each_rank(world, 0), std::vector<int>{0});  // the host name of the only rank
  EXPECT_THROW(node_of_each_rank(world, -1), Error);
}

}  // namespace
}  // namespace myriad::distributed
