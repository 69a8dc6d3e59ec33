// ProcessGroups — the communicators of one rank, built once from the rank grid and passed
// explicitly to whoever communicates (no global group state).
//
// For each axis (tp, cp, ep, dp, pp) of size > 1 the group is world.split(colour = the grid's
// group id of this rank on the axis, key = this rank's coordinate on the axis, name = the axis
// name), so rank i of group(axis) is the member with coordinate i. Building is collective over
// the world: every rank constructs its ProcessGroups at the same point, with the same shape.
// An axis of size 1 gets a LoopbackCommunicator named after the axis. With ep > 1 the
// expert-data group is split too, and with cp > 1 the data-context group (after the axes, in the
// same collective order on every rank).
// Gradient reductions: the groups gradients are reduced over (dp, and dcp / edp where they exist)
// run the algorithm ReductionOptions::dp_reduce settles to for them (node_layout.h): ring (the
// transport's own), tree (TreeCommunicator) or hierarchical (HierarchicalCommunicator over the
// nodes node_of_each_rank finds) — host (MPI) groups only; the choice is in reduction(). With
// ReductionOptions::exact their f32 sums are exact (ops/exact_sum.h: the same bits for every
// algorithm and node grouping; the ring then runs as a RingCommunicator).
// Destroy it before the MpiRuntime (its MPI communicators must be freed before MPI_Finalize).
#pragma once

#include <array>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "myriad/distributed/collective_watchdog.h"
#include "myriad/distributed/communicator.h"
#include "myriad/distributed/node_layout.h"
#include "myriad/distributed/rank_grid.h"

namespace myriad::distributed {

struct ReductionOptions {
  ReductionAlgorithm dp_reduce = ReductionAlgorithm::ring;  // parallel.dp_reduce
  int ranks_per_node = 0;                                   // parallel.ranks_per_node (0 = host names)
  bool exact = false;                                       // parallel.dp_reduce_exact
};

class ProcessGroups {
 public:
  // Throws (naming every factor) when shape.product() differs from world->size().
  ProcessGroups(const GridShape& shape, std::unique_ptr<Communicator> world, const ReductionOptions& reduction = {});
  // A world of one: every group, the world included, is a LoopbackCommunicator.
  static ProcessGroups single();
  // Rank `rank`'s groups of a world of shape.product() ranks that does not exist (a dry run on one
  // process): each group of two or more is a DryRunCommunicator with the rank's coordinate and the
  // axis size (nothing communicates), groups of one are loopbacks. Throws for a rank outside the world.
  static ProcessGroups for_dry_run(const GridShape& shape, int rank);

  ProcessGroups(ProcessGroups&&) noexcept = default;
  ProcessGroups& operator=(ProcessGroups&&) noexcept = default;
  ProcessGroups(const ProcessGroups&) = delete;
  ProcessGroups& operator=(const ProcessGroups&) = delete;
  ~ProcessGroups();

  const RankGrid& grid() const { return grid_; }
  int rank() const { return world_->rank(); }  // rank in the world
  Communicator& world() { return *world_; }
  Communicator& group(Axis axis) { return *groups_[static_cast<int>(axis)]; }
  // The ranks holding the same experts (RankGrid::expert_data_group): the dp group itself when
  // ep is 1, named "edp" otherwise.
  Communicator& expert_data() { return expert_data_ ? *expert_data_ : group(Axis::dp); }
  // The ranks that reduce gradients together (RankGrid::data_context_group): every dp replica's
  // every cp chunk; the dp group itself when cp is 1, named "dcp" otherwise.
  Communicator& data_context() { return data_context_ ? *data_context_ : group(Axis::dp); }

  // The algorithm the dp group's reductions run ("ring", "tree", "hierarchical (2 nodes x 4)",
  // followed by ", exact sums" under ReductionOptions::exact).
  const std::string& reduction() const { return reduction_; }

  // ("world", ...), then one entry per axis in tp, cp, ep, dp, pp order (loopback axes included).
  std::vector<std::pair<std::string, CommStats>> stats() const;

  // Puts the world and every axis group that runs over MPI under `watchdog` (not owned; it must
  // outlive the watching, and every rank must attach the same groups).
  void watch_with(CollectiveWatchdog& watchdog);

 private:
  ProcessGroups(const RankGrid& grid, std::unique_ptr<Communicator> world) : grid_(grid), world_(std::move(world)) {}

  RankGrid grid_;
  std::unique_ptr<Communicator> world_;
  std::array<std::unique_ptr<Communicator>, kAxes.size()> groups_;
  std::unique_ptr<Communicator> expert_data_;   // ep > 1 only
  std::unique_ptr<Communicator> data_context_;  // cp > 1 only
  std::string reduction_ = "ring";
};

}  // namespace myriad::distributed
