// ReplicatedParameters — ZeRO stage 0: every rank holds the full values, gradients and AdamW
// moments. Each bucket of gradients is all-reduced the moment its last unit's gradients are final
// in the step's last micro-batch (earlier micro-batches accumulate locally), and AdamW updates
// everything, redundantly and identically on every rank. Invariant: after the reduction every
// rank holds the same bits, so the gradient norm is computed locally (expert gradients, which
// cover this rank's experts only, are summed over ep).
#pragma once

#include "myriad/parallel/parameter_units.h"

namespace myriad::parallel {

class ReplicatedParameters final : public ParameterUnits {
 public:
  ReplicatedParameters(nn::GptModel& model, distributed::Communicator& dp, const DataParallelOptions& options,
                       const optim::AdamWConfig& adam);

  int stage() const override { return 0; }
  double gradient_sum_squares() const override;

 protected:
  Tensor owned_grads(const ZeroSegment& segment) const override;
  void launch_bucket(int bucket) override;
};

}  // namespace myriad::parallel
