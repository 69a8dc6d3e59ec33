// ProcessGroups: one split of the world per parallel axis (see process_groups.h).
#include "myriad/distributed/process_groups.h"

#include "myriad/distributed/mpi_communicator.h"

#include "myriad/core/error.h"
#include "myriad/distributed/loopback_communicator.h"

namespace myriad::dist {

namespace {
RankGrid checked_grid(const GridShape& shape, const std::unique_ptr<Communicator>& world) {
  MYRIAD_CHECK(world != nullptr, "ProcessGroups: null world communicator");
  return RankGrid(shape, world->size());
}
}  // namespace

ProcessGroups::ProcessGroups(const GridShape& shape, std::unique_ptr<Communicator> world)
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
    const int members = shape.dp / shape.ep;
    if (members == 1) {
      expert_data_ = std::make_unique<LoopbackCommunicator>("edp");
    } else {
      expert_data_ = world_->split(grid_.expert_data_group_id(rank), coord[Axis::dp] / shape.ep, "edp");
    }
  }
  if (shape.cp > 1) {
    data_context_ =
        world_->split(grid_.data_context_group_id(rank), coord[Axis::cp] + shape.cp * coord[Axis::dp], "dcp");
  }
}

ProcessGroups ProcessGroups::single() {
  return ProcessGroups(GridShape{}, std::make_unique<LoopbackCommunicator>("world"));
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
  if (auto* mpi = dynamic_cast<MpiCommunicator*>(world_.get())) watchdog.watch(mpi->progress());
  for (const std::unique_ptr<Communicator>& group : groups_) {
    if (auto* mpi = dynamic_cast<MpiCommunicator*>(group.get())) watchdog.watch(mpi->progress());
  }
  if (auto* mpi = dynamic_cast<MpiCommunicator*>(expert_data_.get())) watchdog.watch(mpi->progress());
  if (auto* mpi = dynamic_cast<MpiCommunicator*>(data_context_.get())) watchdog.watch(mpi->progress());
}

}  // namespace myriad::dist
