// Node layout: host-name all-gather or simulated nodes, and node-regular groups (see node_layout.h).
#include "myriad/distributed/node_layout.h"

#include <unistd.h>

#include <array>
#include <cstring>
#include <map>
#include <sstream>

#include "myriad/core/error.h"
#include "myriad/core/tensor.h"

namespace myriad::distributed {

namespace {
constexpr std::int64_t kHostBytes = 256;

std::string this_host() {
  std::array<char, kHostBytes> name{};
  if (gethostname(name.data(), name.size() - 1) != 0) return "unknown-host";
  return std::string(name.data());
}
}  // namespace

std::vector<int> node_of_each_rank(Communicator& world, int ranks_per_node) {
  const int size = world.size();
  std::vector<int> node(static_cast<std::size_t>(size), 0);
  MYRIAD_CHECK(ranks_per_node >= 0, "parallel.ranks_per_node " << ranks_per_node << " must be >= 0 (0 = detect)");
  if (ranks_per_node > 0) {
    for (int r = 0; r < size; ++r) node[static_cast<std::size_t>(r)] = r / ranks_per_node;
    return node;
  }
  Tensor mine = Tensor::zeros({kHostBytes}, DType::i8);
  const std::string host = this_host();
  std::memcpy(mine.raw_data(), host.data(), std::min<std::size_t>(host.size(), kHostBytes - 1));
  Tensor all = Tensor::zeros({kHostBytes * size}, DType::i8);
  world.all_gather(mine, all);
  std::map<std::string, int> numbers;
  for (int r = 0; r < size; ++r) {
    const char* text = static_cast<const char*>(all.raw_data()) + static_cast<std::ptrdiff_t>(r) * kHostBytes;
    const std::string name(text, strnlen(text, kHostBytes));
    const auto [it, inserted] = numbers.emplace(name, static_cast<int>(numbers.size()));
    node[static_cast<std::size_t>(r)] = it->second;
  }
  return node;
}

std::optional<NodeGrouping> group_by_node(const std::vector<int>& node_of_member, std::string* why) {
  auto refuse = [&](const std::string& reason) -> std::optional<NodeGrouping> {
    if (why) *why = reason;
    return std::nullopt;
  };
  if (node_of_member.empty()) return refuse("the group has no members");
  // Runs of equal node ids, in member order.
  std::vector<std::pair<int, int>> runs;  // (node, members)
  for (int node : node_of_member) {
    if (!runs.empty() && runs.back().first == node) {
      ++runs.back().second;
    } else {
      runs.emplace_back(node, 1);
    }
  }
  std::map<int, int> seen;
  for (const auto& [node, count] : runs) {
    if (seen.count(node)) {
      std::ostringstream out;
      out << "the members on node " << node << " are not consecutive in the group";
      return refuse(out.str());
    }
    seen[node] = count;
  }
  for (const auto& [node, count] : runs) {
    if (count != runs.front().second) {
      std::ostringstream out;
      out << "node " << runs.front().first << " holds " << runs.front().second << " members of the group but node "
          << node << " holds " << count;
      return refuse(out.str());
    }
  }
  return NodeGrouping{static_cast<int>(runs.size()), runs.front().second};
}

ReductionAlgorithm choose_reduction(ReductionAlgorithm requested, const std::vector<int>& node_of_member,
                                    const std::string& group, NodeGrouping* grouping) {
  std::string why;
  const std::optional<NodeGrouping> nodes = group_by_node(node_of_member, &why);
  switch (requested) {
    case ReductionAlgorithm::ring:
    case ReductionAlgorithm::tree:
      return requested;
    case ReductionAlgorithm::hierarchical:
      MYRIAD_CHECK(nodes, "parallel.dp_reduce hierarchical: group '"
                              << group << "' is not spread evenly over nodes (" << why
                              << "); place the ranks so that every node holds the same number of each group's "
                                 "members, set parallel.ranks_per_node, or use dp_reduce ring");
      if (grouping) *grouping = *nodes;
      return requested;
    case ReductionAlgorithm::automatic:
      if (nodes && nodes->nodes >= 2 && nodes->per_node >= 2) {
        if (grouping) *grouping = *nodes;
        return ReductionAlgorithm::hierarchical;
      }
      return ReductionAlgorithm::ring;
  }
  return ReductionAlgorithm::ring;
}

}  // namespace myriad::distributed
