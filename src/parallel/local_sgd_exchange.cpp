// LocalSgdExchange: the replica's own step, the shared skip and the outer step (see
// local_sgd_exchange.h).
#include "myriad/parallel/local_sgd_exchange.h"

#include <cmath>
#include <limits>

#include "flat_copy.h"
#include "myriad/distributed/scalar_reduce.h"
#include "myriad/ops/elementwise.h"

namespace myriad::parallel {

LocalSgdExchange::LocalSgdExchange(ParameterUnits& units, const LocalSgdOptions& options)
    : units_(units),
      local_sgd_(replica_copies(units), moment_copies(units), units.store().flat_values(), options),
      expert_share_(units.options().expert_parallel == nullptr ? 1 : units.options().expert_parallel->size()) {}

optim::OptimizerStepStats LocalSgdExchange::optimizer_step(float lr, float unscale) {
  optim::AdamWOptimizer& adam = units_.optimizer();
  if (expert_share_ > 1) {  // the experts' gradients: the mean over the ep group's tokens (see the header)
    for (optim::OptimizerSegment& s : adam.segments()) {
      if (s.expert)
        add_forward(AddArgs{.alpha = 1.0f / static_cast<float>(expert_share_), .beta = 0.0f}, s.grad, Tensor(), s.grad);
    }
  }
  // Each replica's own gradients; every replica skips when one norm is not finite.
  double sum_squares = units_.sum_over_model_parallel(adam.grad_sum_squares());
  if (distributed::sum_over_ranks(units_.dp(), std::isfinite(sum_squares) ? 0.0 : 1.0) > 0.0) {
    sum_squares = std::numeric_limits<double>::quiet_NaN();
  }
  optim::OptimizerStepStats stats = adam.step(lr, sum_squares, unscale);
  if (!stats.skipped) local_sgd_.after_inner_step(adam.steps_taken());
  return stats;
}

void LocalSgdExchange::consolidate_replicas() {
  optim::AdamWOptimizer& adam = units_.optimizer();
  local_sgd_.consolidate(adam.m(), adam.v());
}

void LocalSgdExchange::snapshot_owned(OwnedState& out) {
  // The outer momentum, packed like the values.
  if (!out.outer_momentum.defined() || out.outer_momentum.numel() != out.values.numel()) {
    out.outer_momentum = Tensor::zeros(out.values.shape());
  }
  for (const ZeroSegment& s : out.segments) {
    copy_to_host(flat_view(local_sgd_.outer_momentum(), s.begin, s.end),
                 out.outer_momentum.data<float>() + s.shard_position);
  }
}

}  // namespace myriad::parallel
