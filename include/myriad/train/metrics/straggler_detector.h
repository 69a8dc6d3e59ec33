// StragglerDetector — finds ranks whose compute is slower than the rest, cheaply.
//
// Each step a rank adds its own compute time (no communication). Every `every` steps one
// all-gather of one float64 per rank (the window's mean) tells every rank all the means; a rank
// whose mean exceeds the (lower) median by more than `margin` (a fraction) is a straggler, reported
// with its grid coordinates and host (host names are gathered once, at construction). Compute
// time excludes communication waits, so the ranks that wait for a slow one are not reported.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "myriad/distributed/communicator.h"
#include "myriad/distributed/rank_grid.h"
#include "myriad/train/metrics/step_metrics.h"

namespace myriad::train {

class StragglerDetector {
 public:
  // Collective over `world` (gathers host names). every = 0 disables the checks.
  StragglerDetector(distributed::Communicator& world, const distributed::RankGrid& grid, std::int64_t every,
                    double margin);

  // Adds one step; on a check step (collective) fills every rank's window mean and the
  // stragglers and returns true.
  bool record(double compute_seconds, std::vector<double>& rank_means, std::vector<Straggler>& stragglers);

  const std::vector<std::string>& hosts() const { return hosts_; }

 private:
  distributed::Communicator& world_;
  const distributed::RankGrid& grid_;
  std::int64_t every_;
  double margin_;
  std::vector<std::string> hosts_;
  double window_sum_ = 0.0;
  std::int64_t window_steps_ = 0;
};

// "tp 0, cp 0, ep 0, dp 1, pp 0"
std::string grid_coordinates(const distributed::RankGrid& grid, int rank);

}  // namespace myriad::train
