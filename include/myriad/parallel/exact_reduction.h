// ExactReduction — the exact gradient exchange: the parameter units' bucket collectives sum the
// replicas' gradients (all-reduce at ZeRO 0, reduce-scatter from 1), over the dp communicator
// whose algorithm parallel.dp_reduce chose (ring, tree, hierarchical; exact fixed-point sums with
// parallel.dp_reduce_exact), and the optimizer steps with the exact global gradient norm. Works
// at every ZeRO stage and placement.
#pragma once

#include "myriad/parallel/gradient_exchange.h"

namespace myriad::parallel {

class ExactReduction final : public GradientExchange {
 public:
  explicit ExactReduction(ParameterUnits& units) : units_(units) {}

  const char* name() const override { return "exact"; }
  bool reduces_exactly() const override { return true; }
  optim::OptimizerStepStats optimizer_step(float lr, float unscale) override { return units_.exact_step(lr, unscale); }

 private:
  ParameterUnits& units_;
};

}  // namespace myriad::parallel
