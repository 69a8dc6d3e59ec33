// StragglerDetector: host names once, window means every K steps, median and margin.
#include "myriad/train/metrics/straggler_detector.h"

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "myriad/distributed/scalar_reduce.h"

namespace myriad::train {

namespace {
constexpr std::int64_t kHostBytes = 64;
}

std::string grid_coordinates(const distributed::RankGrid& grid, int rank) {
  const distributed::GridCoord c = grid.coords(rank);
  std::string out;
  for (distributed::Axis axis : distributed::kAxes) {
    if (!out.empty()) out += ", ";
    out += std::string(distributed::axis_name(axis)) + " " + std::to_string(c[axis]);
  }
  return out;
}

StragglerDetector::StragglerDetector(distributed::Communicator& world, const distributed::RankGrid& grid,
                                     std::int64_t every, double margin)
    : world_(world), grid_(grid), every_(every), margin_(margin) {
  char host[kHostBytes] = {};
  ::gethostname(host, kHostBytes - 1);
  Tensor mine = Tensor::zeros({kHostBytes}, DType::i8);
  std::memcpy(mine.raw_data(), host, kHostBytes);
  Tensor all = Tensor::zeros({kHostBytes * world.size()}, DType::i8);
  world.all_gather(mine, all);
  for (int r = 0; r < world.size(); ++r) {
    const char* name = static_cast<const char*>(all.raw_data()) + r * kHostBytes;
    hosts_.emplace_back(name, strnlen(name, kHostBytes));
  }
}

bool StragglerDetector::record(double compute_seconds, std::vector<double>& rank_means,
                               std::vector<Straggler>& stragglers) {
  if (every_ <= 0) return false;
  window_sum_ += compute_seconds;
  if (++window_steps_ < every_) return false;
  rank_means = distributed::gather_over_ranks(world_, window_sum_ / static_cast<double>(window_steps_));
  window_sum_ = 0.0;
  window_steps_ = 0;
  std::vector<double> sorted = rank_means;
  std::sort(sorted.begin(), sorted.end());
  const std::size_t n = sorted.size();
  // Lower median: with an even count it is the faster middle rank, so that with two ranks a slow
  // one is compared with the healthy one (the mean of the two would hide half of its delay).
  const double median = sorted[(n - 1) / 2];
  stragglers.clear();
  for (std::size_t r = 0; r < n; ++r) {
    if (rank_means[r] > median * (1.0 + margin_)) {
      const int rank = static_cast<int>(r);
      stragglers.push_back({rank, grid_coordinates(grid_, rank), hosts_[r], rank_means[r], median});
    }
  }
  return true;
}

}  // namespace myriad::train
