// ProcessGroups: one split of the world per parallel axis (see process_groups.h).
#include "myriad/distributed/process_groups.h"

#include "myriad/distributed/mpi_communicator.h"

#include "myriad/core/error.h"
#include "myriad/distributed/dry_run_communicator.h"
#include "myriad/distributed/hierarchical_communicator.h"
#include "myriad/distributed/loopback_communicator.h"
#include "myriad/distributed/ring_communicator.h"
#include "myriad/distributed/tree_communicator.h"

namespace myriad::distributed {

namespace {
RankGrid checked_grid(const GridShape& shape, const std::unique_ptr<Communicator>& world) {
  MYRIAD_CHECK(world != nullptr, "ProcessGroups: null world communicator");
  return RankGrid(shape, world->size());
}

// `group` (members: world ranks in group order) wrapped in the reduction algorithm the options
// settle to; host groups of >= 2 members only. Collective over the group. Returns the algorithm.
std::string wrap_for_reduction(std::unique_ptr<Communicator>& group, const std::vector<int>& members,
                               const std::vector<int>& node_of_rank, const ReductionOptions& options) {
  if (group->size() < 2 || dynamic_cast<MpiCommunicator*>(group.get()) == nullptr) return "ring";
  std::vector<int> node_of_member;
  node_of_member.reserve(members.size());
  for (int member : members) node_of_member.push_back(node_of_rank.at(static_cast<std::size_t>(member)));
  NodeGrouping grouping;
  switch (choose_reduction(options.dp_reduce, node_of_member, group->name(), &grouping)) {
    case ReductionAlgorithm::tree:
      group = std::make_unique<TreeCommunicator>(std::move(group), options.exact);
      break;
    case ReductionAlgorithm::hierarchical:
      group = std::make_unique<HierarchicalCommunicator>(std::move(group), grouping, options.exact);
      break;
    default:
      if (!options.exact) return "ring";
      group = std::make_unique<RingCommunicator>(std::move(group), true);
      break;
  }
  return static_cast<ComposedCommunicator&>(*group).description();
}
}  // namespace

ProcessGroups::ProcessGroups(const GridShape& shape, std::unique_ptr<Communicator> world,
                             const ReductionOptions& reduction)
    : grid_(checked_grid(shape, world)), world_(std::move(world)) {
  const int rank = world_->rank();
  const GridCoord coord = grid_.coords(rank);
  for (Axis axis : kAxes) {
    auto& group = groups_[static_cast<int>(axis)];
    if (grid_.size(axis) == 1) {
      group = std::make_unique<LoopbackCommunicator>(axis_name(axis));
    } else {
      group = world_->split(grid_.group_id(axis, rank), coord[axis], axis_name(axis));
    }
    MYRIAD_CHECK(group->size() == grid_.size(axis) && group->rank() == coord[axis],
                 "ProcessGroups: group " << axis_name(axis) << " of " << grid_.describe(rank) << " has rank "
                                         << group->rank() << " of " << group->size() << ", expected " << coord[axis]
                                         << " of " << grid_.size(axis));
  }
  if (shape.ep > 1) {
    const int members = shape.dp / shape.ep * shape.cp;  // RankGrid::expert_data_group's order
    if (members == 1) {
      expert_data_ = std::make_unique<LoopbackCommunicator>("edp");
    } else {
      expert_data_ = world_->split(grid_.expert_data_group_id(rank),
                                   coord[Axis::dp] / shape.ep * shape.cp + coord[Axis::cp], "edp");
    }
  }
  if (shape.cp > 1) {
    data_context_ =
        world_->split(grid_.data_context_group_id(rank), coord[Axis::cp] + shape.cp * coord[Axis::dp], "dcp");
  }
  if ((reduction.dp_reduce == ReductionAlgorithm::ring && !reduction.exact) || world_->size() < 2) return;
  // Every rank takes the same branches below (they depend on the shape only), so the splits the
  // wrappers make stay collective.
  const std::vector<int> node_of_rank = node_of_each_rank(*world_, reduction.ranks_per_node);
  auto& dp = groups_[static_cast<int>(Axis::dp)];
  reduction_ = wrap_for_reduction(dp, grid_.group(Axis::dp, rank), node_of_rank, reduction);
  if (expert_data_) wrap_for_reduction(expert_data_, grid_.expert_data_group(rank), node_of_rank, reduction);
  if (data_context_) {
    reduction_ = wrap_for_reduction(data_context_, grid_.data_context_group(rank), node_of_rank, reduction);
  }
}

ProcessGroups ProcessGroups::single() {
  return ProcessGroups(GridShape{}, std::make_unique<LoopbackCommunicator>("world"));
}

ProcessGroups ProcessGroups::for_dry_run(const GridShape& shape, int rank) {
  const RankGrid grid(shape, shape.product());
  ProcessGroups groups(grid, std::make_unique<DryRunCommunicator>("world", rank, shape.product()));
  const GridCoord coord = grid.coords(rank);
  auto make = [](const char* name, int index, int size) -> std::unique_ptr<Communicator> {
    if (size == 1) return std::make_unique<LoopbackCommunicator>(name);
    return std::make_unique<DryRunCommunicator>(name, index, size);
  };
  for (Axis axis : kAxes) groups.groups_[static_cast<int>(axis)] = make(axis_name(axis), coord[axis], grid.size(axis));
  if (shape.ep > 1) {
    groups.expert_data_ =
        make("edp", coord[Axis::dp] / shape.ep * shape.cp + coord[Axis::cp], shape.dp / shape.ep * shape.cp);
  }
  if (shape.cp > 1) {
    groups.data_context_ = make("dcp", coord[Axis::cp] + shape.cp * coord[Axis::dp], shape.cp * shape.dp);
  }
  return groups;
}

ProcessGroups::~ProcessGroups() {
  // Groups before the world they were split from.
  data_context_.reset();
  expert_data_.reset();
  for (auto& group : groups_) group.reset();
  world_.reset();
}

std::vector<std::pair<std::string, CommStats>> ProcessGroups::stats() const {
  std::vector<std::pair<std::string, CommStats>> out;
  if (!world_) return out;  // moved from
  out.emplace_back(world_->name(), world_->stats());
  for (Axis axis : kAxes) {
    const auto& group = groups_[static_cast<int>(axis)];
    out.emplace_back(group->name(), group->stats());
  }
  return out;
}

void ProcessGroups::watch_with(CollectiveWatchdog& watchdog) {
  auto watch = [&](Communicator* group) {
    if (auto* mpi = dynamic_cast<MpiCommunicator*>(group)) watchdog.watch(mpi->progress());
    if (auto* composed = dynamic_cast<ComposedCommunicator*>(group)) {
      for (Communicator* part : composed->parts()) {
        if (auto* mpi = dynamic_cast<MpiCommunicator*>(part)) watchdog.watch(mpi->progress());
      }
    }
  };
  watch(world_.get());
  for (const std::unique_ptr<Communicator>& group : groups_) watch(group.get());
  watch(expert_data_.get());
  watch(data_context_.get());
}

}  // namespace myriad::distributed
