// LocalSgdExchange — local SGD / DiLoCo (training.sync: local) as a gradient exchange: gradients
// are never reduced; each replica takes its own AdamW step, every replica skips a step when any
// replica's gradient norm is not finite (so all stay at the same step count), and LocalSgd runs
// the outer step every local_steps steps. consolidate_replicas makes the replicas identical
// (before a checkpoint); the outer momentum joins the owned snapshot, and a load resets the anchor.
#pragma once

#include "myriad/parallel/gradient_exchange.h"
#include "myriad/parallel/local_sgd.h"

namespace myriad::parallel {

class LocalSgdExchange final : public GradientExchange {
 public:
  // `units`: ReplicatedParameters on the host (make_gradient_exchange checks).
  LocalSgdExchange(ParameterUnits& units, const LocalSgdOptions& options);

  const char* name() const override { return "local"; }
  bool reduces_exactly() const override { return false; }
  optim::OptimizerStepStats optimizer_step(float lr, float unscale) override;
  void consolidate_replicas() override;
  void after_load() override { local_sgd_.reset_anchor(); }
  void snapshot_owned(OwnedState& out) override;
  LocalSgd* local_sgd() override { return &local_sgd_; }

 private:
  ParameterUnits& units_;
  LocalSgd local_sgd_;
};

}  // namespace myriad::parallel
