// OneBitAdamExchange — 1-bit Adam (training.optimizer: onebit_adam): exact bucket reductions and
// AdamW for the first freeze_step optimizer steps (bit-identical to adamw up to there); then the
// gradients are not reduced — each rank forms its momentum from its local gradient (clipped by
// the norm of P·g_r averaged over the ranks) and the momenta are summed as signs with a scale per
// 64 elements through distributed::CompressedSum, inside the optimizer step (optim/onebit_adam.h).
// Every rank decodes the same bytes, so the replicas stay bitwise identical. freeze_step >= 1.
//
// ep > 1 (a mixture of experts with expert parallelism): two compressed sums over two groups. The
// dense momenta (the optimizer's dense segments, packed back to back) are summed over dp (P
// ranks); the expert momenta over the expert-data group (E = P / ep ranks holding the same
// experts). An expert gradient on rank r sums the ep group's tokens (each over the global token
// count), so E g_r — not P g_r — estimates the global expert gradient: the exchange divides the
// expert gradients by ep before the step (then the step's P g_r is E g_r), and multiplies the
// summed expert momenta by ep after the sum (then the step's 1 / P is 1 / E). The clipping norm
// is the mean over the copies of each element of the squared estimates: P (sum_r |g_r,dense|^2 +
// ep sum_r |g_r,expert / ep|^2). At ep 1 all of this is the single sum over dp.
#pragma once

#include <cstdint>
#include <memory>

#include "myriad/distributed/compressed_sum.h"
#include "myriad/parallel/gradient_exchange.h"
#include "myriad/parallel/replica_copies.h"

namespace myriad::parallel {

class OneBitAdamExchange final : public GradientExchange {
 public:
  // `units`: ReplicatedParameters (make_gradient_exchange checks), on the host or a device.
  OneBitAdamExchange(ParameterUnits& units, std::int64_t freeze_step);

  const char* name() const override { return "onebit_adam"; }
  bool reduces_exactly() const override { return units_.optimizer().steps_taken() < freeze_step_; }
  optim::OptimizerStepStats optimizer_step(float lr, float unscale) override;

 private:
  void sum_momentum(Tensor& momentum);  // the compressed sum(s) of the packed momenta, in place

  ParameterUnits& units_;
  std::int64_t freeze_step_;
  ReplicaCopies copies_;  // of the packed moments
  int ep_ = 1;
  std::unique_ptr<distributed::CompressedSum> dense_sum_, expert_sum_;  // expert_sum_: ep > 1
  Tensor dense_, experts_;  // ep > 1: the momenta of each kind, packed back to back
};

}  // namespace myriad::parallel
