// RankGrid arithmetic (see rank_grid.h for the rank formula).
#include "myriad/distributed/rank_grid.h"

#include <sstream>

#include "myriad/core/error.h"

namespace myriad::dist {

const char* axis_name(Axis axis) {
  switch (axis) {
    case Axis::tp: return "tp";
    case Axis::cp: return "cp";
    case Axis::ep: return "ep";
    case Axis::dp: return "dp";
    case Axis::pp: return "pp";
  }
  return "?";
}

int GridShape::size(Axis axis) const {
  switch (axis) {
    case Axis::tp: return tp;
    case Axis::cp: return cp;
    case Axis::ep: return ep;
    case Axis::dp: return dp;
    case Axis::pp: return pp;
  }
  return 1;
}

RankGrid::RankGrid(const GridShape& shape, int world_size) : shape_(shape), world_(world_size) {
  std::ostringstream factors;
  for (Axis axis : kAxes) factors << (axis == Axis::tp ? "" : " x ") << axis_name(axis) << " " << shape.size(axis);
  for (Axis axis : kAxes) {
    MYRIAD_CHECK(shape.size(axis) >= 1, "parallel layout " << factors.str() << ": every degree must be >= 1");
  }
  MYRIAD_CHECK(shape.product() == world_size, "parallel layout " << factors.str() << " = " << shape.product()
                                                                 << " ranks, but the world has " << world_size);
}

int RankGrid::stride(Axis axis) const {
  int s = 1;
  for (Axis a : kAxes) {
    if (a == axis) return s;
    s *= shape_.size(a);
  }
  return s;
}

void RankGrid::check_rank(int rank) const {
  MYRIAD_CHECK(rank >= 0 && rank < world_, "rank " << rank << " outside the world of " << world_);
}

GridCoord RankGrid::coords(int rank) const {
  check_rank(rank);
  GridCoord c;
  for (Axis axis : kAxes) {
    c[axis] = rank % shape_.size(axis);
    rank /= shape_.size(axis);
  }
  return c;
}

int RankGrid::rank_of(const GridCoord& c) const {
  int rank = 0;
  for (Axis axis : kAxes) {
    MYRIAD_CHECK(c[axis] >= 0 && c[axis] < shape_.size(axis),
                 axis_name(axis) << " coordinate " << c[axis] << " outside [0, " << shape_.size(axis) << ")");
    rank += c[axis] * stride(axis);
  }
  return rank;
}

std::vector<int> RankGrid::group(Axis axis, int rank) const {
  GridCoord c = coords(rank);
  std::vector<int> members;
  for (int i = 0; i < shape_.size(axis); ++i) {
    c[axis] = i;
    members.push_back(rank_of(c));
  }
  return members;
}

int RankGrid::group_id(Axis axis, int rank) const {
  GridCoord c = coords(rank);
  c[axis] = 0;
  // Rank of the group's first member with `axis` removed from the mixed-radix number.
  int id = 0, scale = 1;
  for (Axis a : kAxes) {
    if (a == axis) continue;
    id += c[a] * scale;
    scale *= shape_.size(a);
  }
  return id;
}

int RankGrid::pipeline_prev(int rank) const {
  GridCoord c = coords(rank);
  if (c[Axis::pp] == 0) return -1;
  c[Axis::pp] -= 1;
  return rank_of(c);
}

int RankGrid::pipeline_next(int rank) const {
  GridCoord c = coords(rank);
  if (c[Axis::pp] + 1 == shape_.pp) return -1;
  c[Axis::pp] += 1;
  return rank_of(c);
}

int RankGrid::ring_prev(Axis axis, int rank) const {
  GridCoord c = coords(rank);
  c[axis] = (c[axis] + shape_.size(axis) - 1) % shape_.size(axis);
  return rank_of(c);
}

int RankGrid::ring_next(Axis axis, int rank) const {
  GridCoord c = coords(rank);
  c[axis] = (c[axis] + 1) % shape_.size(axis);
  return rank_of(c);
}

std::string RankGrid::describe(int rank) const {
  GridCoord c = coords(rank);
  std::ostringstream out;
  out << "rank " << rank << " (";
  for (Axis axis : kAxes) out << (axis == Axis::tp ? "" : ", ") << axis_name(axis) << " " << c[axis];
  out << ")";
  return out.str();
}

}  // namespace myriad::dist
