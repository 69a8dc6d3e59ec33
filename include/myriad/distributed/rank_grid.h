// RankGrid — pure arithmetic from a world of ranks to coordinates on the parallel axes.
//
// The world is TP * CP * DP * PP ranks, fastest-varying first:
//   rank = tp + TP * (cp + CP * (dp + DP * pp)).
// Expert parallelism lives inside data parallelism (Megatron's choice): EP divides DP, and a
// rank's ep coordinate is dp % EP, so the EP ranks of an ep group are consecutive data-parallel
// replicas (neighbours, for the all-to-all) and each holds a different share of the experts. The
// ranks holding the same experts — equal dp % EP — form the expert-data group (DP / EP members,
// listed by dp / EP), over which expert gradients are reduced; dense parameters are reduced over
// the whole dp group. Tensor-parallel peers are neighbouring ranks (they share a node); pipeline
// stages are the farthest apart. A group along an axis is the set of ranks that differ only in
// that coordinate, listed by that coordinate. No MPI here: communicators are built elsewhere.
#pragma once

#include <array>
#include <string>
#include <vector>

namespace myriad::distributed {

enum class Axis { tp = 0, cp = 1, ep = 2, dp = 3, pp = 4 };
inline constexpr std::array<Axis, 5> kAxes = {Axis::tp, Axis::cp, Axis::ep, Axis::dp, Axis::pp};
const char* axis_name(Axis axis);

struct GridShape {
  int tp = 1, cp = 1, ep = 1, dp = 1, pp = 1;  // ep divides dp
  int size(Axis axis) const;
  int product() const { return tp * cp * dp * pp; }  // the world (ep is inside dp)
};

struct GridCoord {
  std::array<int, 5> index{};  // by Axis
  int operator[](Axis axis) const { return index[static_cast<int>(axis)]; }
  int& operator[](Axis axis) { return index[static_cast<int>(axis)]; }
  bool operator==(const GridCoord&) const = default;
};

class RankGrid {
 public:
  // Throws naming every factor when the product of the degrees is not world_size, or ep does not
  // divide dp.
  RankGrid(const GridShape& shape, int world_size);

  int world_size() const { return world_; }
  const GridShape& shape() const { return shape_; }
  int size(Axis axis) const { return shape_.size(axis); }

  GridCoord coords(int rank) const;
  int rank_of(const GridCoord& coord) const;
  // Ranks that differ from `rank` only along `axis`, ordered by that coordinate (includes rank).
  std::vector<int> group(Axis axis, int rank) const;
  // Which group of `axis` the rank belongs to: equal for all members, distinct across groups,
  // in [0, world / size(axis)) — usable as an MPI_Comm_split colour.
  int group_id(Axis axis, int rank) const;
  // The ranks holding the same experts as `rank` (same tp, pp and dp % ep; every cp rank, which
  // routes other chunks of the same sequences to the same experts), by dp / ep, then cp; and an
  // id equal for its members, distinct across such groups (an MPI_Comm_split colour). Expert
  // gradients sum over it, as the dense ones over data_context_group.
  std::vector<int> expert_data_group(int rank) const;
  int expert_data_group_id(int rank) const;
  // The ranks that hold the same parameters as `rank` and train on different tokens (same tp and
  // pp: every dp replica's every cp chunk), ordered by cp + CP * dp; and an id equal for its
  // members, distinct across such groups (an MPI_Comm_split colour). Gradients reduce over it.
  std::vector<int> data_context_group(int rank) const;
  int data_context_group_id(int rank) const;
  // Previous / next pipeline stage of `rank` (same tp, cp, ep, dp); -1 past the ends.
  int pipeline_prev(int rank) const;
  int pipeline_next(int rank) const;
  // Neighbours on the ring of `axis` (wrapping around).
  int ring_prev(Axis axis, int rank) const;
  int ring_next(Axis axis, int rank) const;
  // "rank 5 (tp 1, cp 0, ep 0, dp 2, pp 0)"
  std::string describe(int rank) const;

 private:
  void check_rank(int rank) const;
  // `c` with coordinate `axis` set to `value` (ep moves dp within its ep group).
  GridCoord with(GridCoord c, Axis axis, int value) const;
  GridShape shape_;
  int world_;
};

}  // namespace myriad::distributed
