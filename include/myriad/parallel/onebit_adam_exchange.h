// OneBitAdamExchange — 1-bit Adam (training.optimizer: onebit_adam): exact bucket reductions and
// AdamW for the first freeze_step optimizer steps (bit-identical to adamw up to there); then the
// gradients are not reduced — each rank forms its momentum from its local gradient (clipped by
// the norm of P·g_r averaged over the ranks) and the momenta are summed as signs with a scale per
// 64 elements through distributed::CompressedSum, inside the optimizer step (optim/onebit_adam.h).
// Every rank decodes the same bytes, so the replicas stay bitwise identical. freeze_step >= 1.
#pragma once

#include <cstdint>

#include "myriad/distributed/compressed_sum.h"
#include "myriad/parallel/gradient_exchange.h"

namespace myriad::parallel {

class OneBitAdamExchange final : public GradientExchange {
 public:
  // `units`: ReplicatedParameters (make_gradient_exchange checks), on the host or a device.
  OneBitAdamExchange(ParameterUnits& units, std::int64_t freeze_step);

  const char* name() const override { return "onebit_adam"; }
  bool reduces_exactly() const override { return units_.optimizer().steps_taken() < freeze_step_; }
  optim::OptimizerStepStats optimizer_step(float lr, float unscale) override;

 private:
  ParameterUnits& units_;
  std::int64_t freeze_step_;
  distributed::CompressedSum momentum_sum_;
};

}  // namespace myriad::parallel
