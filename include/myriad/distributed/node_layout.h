// Node layout — which node each rank runs on, and how a group's members fall onto nodes.
//
// node_of_each_rank(world, ranks_per_node): ranks_per_node > 0 simulates nodes (rank r is on
// node r / ranks_per_node: for studies on one machine); 0 asks the machines: every rank's host
// name is all-gathered and nodes are numbered in order of their first rank. Collective.
// group_by_node: a group (its members' node ids in group-rank order) is node-regular when every
// node it touches holds the same number L of its members and they are consecutive in the group;
// then member d is local index d % L on node d / L. Hierarchical reductions need that.
// choose_reduction settles parallel.dp_reduce for one group.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "myriad/distributed/communicator.h"

namespace myriad::distributed {

std::vector<int> node_of_each_rank(Communicator& world, int ranks_per_node);

// parallel.dp_reduce as the distributed layer sees it (train/config_wiring.h converts).
enum class ReductionAlgorithm { automatic, ring, tree, hierarchical };

struct NodeGrouping {
  int nodes = 1;     // N: nodes the group spans
  int per_node = 1;  // L: members on each of them
};

// The grouping of a group whose member d runs on node node_of_member[d]; nullopt when it is not
// node-regular, with the reason in *why ("members 0, 1, 2 on node 0 but 3 on node 1").
std::optional<NodeGrouping> group_by_node(const std::vector<int>& node_of_member, std::string* why = nullptr);

// What parallel.dp_reduce means for a group whose members run on node_of_member: automatic
// becomes hierarchical when the group is node-regular over >= 2 nodes with >= 2 members each,
// ring otherwise; ring and tree stay; hierarchical throws (naming `group` and the reason) when
// the group is not node-regular. `grouping` is set for hierarchical.
ReductionAlgorithm choose_reduction(ReductionAlgorithm requested, const std::vector<int>& node_of_member,
                                    const std::string& group, NodeGrouping* grouping);

}  // namespace myriad::distributed
