// RankGrid arithmetic (see rank_grid.h for the rank formula).
#include "myriad/distributed/rank_grid.h"

#include <array>
#include <sstream>
#include <utility>
#include <vector>

#include "myriad/core/error.h"

namespace myriad::distributed {

const char* axis_name(Axis axis) {
  switch (axis) {
    case Axis::tp:
      return "tp";
    case Axis::cp:
      return "cp";
    case Axis::ep:
      return "ep";
    case Axis::dp:
      return "dp";
    case Axis::pp:
      return "pp";
  }
  return "?";
}

int GridShape::size(Axis axis) const {
  switch (axis) {
    case Axis::tp:
      return tp;
    case Axis::cp:
      return cp;
    case Axis::ep:
      return ep;
    case Axis::dp:
      return dp;
    case Axis::pp:
      return pp;
  }
  return 1;
}

namespace {
// The axes that factor the world, fastest first (ep is derived from dp).
constexpr std::array<Axis, 4> kWorldAxes = {Axis::tp, Axis::cp, Axis::dp, Axis::pp};

// The position of `digits` (each a coordinate and its radix, the first varying fastest) in the
// mixed-radix numbering they define: equal for equal digits, dense in [0, product of radices).
int mixed_radix(const std::vector<std::pair<int, int>>& digits) {
  int index = 0, scale = 1;
  for (const auto& [digit, radix] : digits) {
    index += digit * scale;
    scale *= radix;
  }
  return index;
}

}  // namespace

RankGrid::RankGrid(const GridShape& shape, int world_size) : shape_(shape), world_(world_size) {
  std::ostringstream factors;
  for (Axis axis : kWorldAxes) factors << (axis == Axis::tp ? "" : " x ") << axis_name(axis) << " " << shape.size(axis);
  for (Axis axis : kAxes) {
    MYRIAD_CHECK(shape.size(axis) >= 1,
                 "parallel layout " << factors.str() << ", ep " << shape.ep << ": every degree must be >= 1");
  }
  MYRIAD_CHECK(shape.product() == world_size, "parallel layout " << factors.str() << " = " << shape.product()
                                                                 << " ranks, but the world has " << world_size);
  MYRIAD_CHECK(shape.dp % shape.ep == 0, "parallel layout: ep " << shape.ep << " must divide dp " << shape.dp
                                                                << " (expert parallelism splits the data-parallel "
                                                                   "replicas into groups of ep)");
}

void RankGrid::check_rank(int rank) const {
  MYRIAD_CHECK(rank >= 0 && rank < world_, "rank " << rank << " outside the world of " << world_);
}

GridCoord RankGrid::coords(int rank) const {
  check_rank(rank);
  GridCoord c;
  for (Axis axis : kWorldAxes) {
    c[axis] = rank % shape_.size(axis);
    rank /= shape_.size(axis);
  }
  c[Axis::ep] = c[Axis::dp] % shape_.ep;
  return c;
}

int RankGrid::rank_of(const GridCoord& c) const {
  for (Axis axis : kAxes) {
    MYRIAD_CHECK(c[axis] >= 0 && c[axis] < shape_.size(axis),
                 axis_name(axis) << " coordinate " << c[axis] << " outside [0, " << shape_.size(axis) << ")");
  }
  MYRIAD_CHECK(c[Axis::ep] == c[Axis::dp] % shape_.ep, "ep coordinate " << c[Axis::ep] << " does not match dp "
                                                                        << c[Axis::dp] << " (ep = dp % " << shape_.ep
                                                                        << ")");
  std::vector<std::pair<int, int>> digits;
  digits.reserve(kWorldAxes.size());
  for (Axis axis : kWorldAxes) digits.emplace_back(c[axis], shape_.size(axis));
  return mixed_radix(digits);
}

GridCoord RankGrid::with(GridCoord c, Axis axis, int value) const {
  if (axis == Axis::ep) {
    c[Axis::dp] = c[Axis::dp] - c[Axis::ep] + value;
  } else if (axis == Axis::dp) {
    c[Axis::dp] = value;
  }
  c[axis] = value;
  c[Axis::ep] = c[Axis::dp] % shape_.ep;
  return c;
}

std::vector<int> RankGrid::group(Axis axis, int rank) const {
  const GridCoord c = coords(rank);
  std::vector<int> members;
  members.reserve(static_cast<std::size_t>(shape_.size(axis)));
  for (int i = 0; i < shape_.size(axis); ++i) members.push_back(rank_of(with(c, axis, i)));
  return members;
}

int RankGrid::group_id(Axis axis, int rank) const {
  // Numbered by the coordinates its members share: every world axis but `axis`, where the ranks
  // of an ep group share dp / ep (ep is dp % ep).
  const GridCoord c = coords(rank);
  std::vector<std::pair<int, int>> shared;
  for (Axis a : kWorldAxes) {
    if (a == Axis::dp && axis == Axis::ep) {
      shared.emplace_back(c[Axis::dp] / shape_.ep, shape_.dp / shape_.ep);
    } else if (a != axis) {
      shared.emplace_back(c[a], shape_.size(a));
    }
  }
  return mixed_radix(shared);
}

std::vector<int> RankGrid::expert_data_group(int rank) const {
  const GridCoord c = coords(rank);
  std::vector<int> members;
  members.reserve(static_cast<std::size_t>(shape_.dp / shape_.ep * shape_.cp));
  for (int i = 0; i < shape_.dp / shape_.ep; ++i) {
    GridCoord m = with(c, Axis::dp, i * shape_.ep + c[Axis::ep]);
    for (int x = 0; x < shape_.cp; ++x) {
      m[Axis::cp] = x;
      members.push_back(rank_of(m));
    }
  }
  return members;
}

int RankGrid::expert_data_group_id(int rank) const {
  // Its members share tp, pp and dp % ep.
  const GridCoord c = coords(rank);
  return mixed_radix({{c[Axis::tp], shape_.tp}, {c[Axis::dp] % shape_.ep, shape_.ep}, {c[Axis::pp], shape_.pp}});
}

std::vector<int> RankGrid::data_context_group(int rank) const {
  GridCoord c = coords(rank);
  std::vector<int> members;
  for (int d = 0; d < shape_.dp; ++d) {
    for (int x = 0; x < shape_.cp; ++x) {
      c = with(c, Axis::dp, d);  // the ep coordinate follows dp
      c[Axis::cp] = x;
      members.push_back(rank_of(c));
    }
  }
  return members;
}

int RankGrid::data_context_group_id(int rank) const {
  const GridCoord c = coords(rank);
  return mixed_radix({{c[Axis::tp], shape_.tp}, {c[Axis::pp], shape_.pp}});
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
  const GridCoord c = coords(rank);
  return rank_of(with(c, axis, (c[axis] + shape_.size(axis) - 1) % shape_.size(axis)));
}

int RankGrid::ring_next(Axis axis, int rank) const {
  const GridCoord c = coords(rank);
  return rank_of(with(c, axis, (c[axis] + 1) % shape_.size(axis)));
}

std::string RankGrid::describe(int rank) const {
  GridCoord c = coords(rank);
  std::ostringstream out;
  out << "rank " << rank << " (";
  for (Axis axis : kAxes) out << (axis == Axis::tp ? "" : ", ") << axis_name(axis) << " " << c[axis];
  out << ")";
  return out.str();
}

}  // namespace myriad::distributed
