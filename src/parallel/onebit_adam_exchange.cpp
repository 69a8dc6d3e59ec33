// OneBitAdamExchange: exact steps through freeze_step, then the compressed-momentum step; at
// ep > 1 two compressed sums over two groups (see onebit_adam_exchange.h).
#include "myriad/parallel/onebit_adam_exchange.h"

#include "flat_copy.h"
#include "myriad/distributed/scalar_reduce.h"
#include "myriad/ops/elementwise.h"
#include "myriad/optim/onebit_adam.h"

namespace myriad::parallel {

namespace {
std::int64_t checked_freeze_step(std::int64_t freeze_step) {
  MYRIAD_CHECK(freeze_step >= 1, "1-bit Adam: freeze_step " << freeze_step << " must be >= 1");
  return freeze_step;
}

std::int64_t total(const std::vector<FlatRange>& ranges) {
  std::int64_t n = 0;
  for (const FlatRange& r : ranges) n += r.size();
  return n;
}

void scale(float alpha, Tensor t) { add_forward(AddArgs{.alpha = alpha, .beta = 0.0f}, t, Tensor(), t); }

// packed <- the ranges of `flat` back to back (to_flat: the other way).
void pack(const Tensor& flat, const std::vector<FlatRange>& ranges, Tensor& packed, bool to_flat) {
  std::int64_t at = 0;
  for (const FlatRange& r : ranges) {
    Tensor part = flat_view(packed, at, at + r.size()), range = flat_view(flat, r.begin, r.end);
    if (to_flat) {
      copy_floats(part, range);
    } else {
      copy_floats(range, part);
    }
    at += r.size();
  }
}
}  // namespace

OneBitAdamExchange::OneBitAdamExchange(ParameterUnits& units, std::int64_t freeze_step)
    : units_(units), freeze_step_(checked_freeze_step(freeze_step)), copies_(moment_copies(units)) {
  const distributed::CompressionSpec sign{distributed::Compression::sign};
  if (!copies_.split()) {
    dense_sum_ = std::make_unique<distributed::CompressedSum>(units.dp(), units.optimizer().m().numel(), sign,
                                                              units.placement());
    return;
  }
  ep_ = units.options().expert_parallel->size();
  const std::int64_t dense = total(copies_.dense_ranges), experts = total(copies_.expert_ranges);
  dense_ = units.placement().empty({dense});
  experts_ = units.placement().empty({experts});
  dense_sum_ = std::make_unique<distributed::CompressedSum>(units.dp(), dense, sign, units.placement());
  expert_sum_ = std::make_unique<distributed::CompressedSum>(*copies_.experts, experts, sign, units.placement());
}

void OneBitAdamExchange::sum_momentum(Tensor& momentum) {
  if (!copies_.split()) return dense_sum_->sum(momentum);
  pack(momentum, copies_.dense_ranges, dense_, false);
  pack(momentum, copies_.expert_ranges, experts_, false);
  dense_sum_->sum(dense_);
  expert_sum_->sum(experts_);
  scale(static_cast<float>(ep_), experts_);  // the step's 1 / P becomes 1 / E for the experts
  pack(momentum, copies_.dense_ranges, dense_, true);
  pack(momentum, copies_.expert_ranges, experts_, true);
}

optim::OptimizerStepStats OneBitAdamExchange::optimizer_step(float lr, float unscale) {
  if (reduces_exactly()) return units_.exact_step(lr, unscale);
  // Local gradients: P g_r estimates the global gradient; its squared norm averaged over ranks.
  optim::AdamWOptimizer& adam = units_.optimizer();
  const int replicas = units_.dp().size();
  double local_squares = 0.0;
  if (copies_.split()) {
    for (optim::OptimizerSegment& s : adam.segments()) {
      if (s.expert) scale(1.0f / static_cast<float>(ep_), s.grad);  // then P g_r = E g_r for the experts
    }
    const auto [dense, expert] = adam.grad_sum_squares_by_kind();
    local_squares = dense + static_cast<double>(ep_) * expert;
  } else {
    local_squares = adam.grad_sum_squares();
  }
  const double sum_squares =
      units_.sum_over_model_parallel(distributed::sum_over_ranks(units_.dp(), local_squares) * replicas);
  const optim::OneBitAdamArgs args{lr, sum_squares, unscale, replicas, freeze_step_};
  return optim::onebit_adam_step(adam, args, [this](Tensor& momentum) { sum_momentum(momentum); });
}

}  // namespace myriad::parallel
