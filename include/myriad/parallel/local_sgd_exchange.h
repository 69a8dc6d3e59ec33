// LocalSgdExchange — local SGD / DiLoCo (training.sync: local) as a gradient exchange: gradients
// are never reduced; each replica takes its own AdamW step, every replica skips a step when any
// replica's gradient norm is not finite (so all stay at the same step count), and LocalSgd runs
// the outer step every local_steps steps. consolidate_replicas makes the replicas identical
// (before a checkpoint); the outer momentum joins the owned snapshot, and a load resets the anchor.
//
// ep > 1 (a mixture of experts with expert parallelism): a rank's dense gradients are the mean
// over its own tokens (the trainer divides by the rank's token count), but an expert's gradient on
// rank r sums the routed tokens of every rank of the ep group, each divided by its own rank's count:
// ep times the mean over the ep group's tokens when the counts are equal. The inner step divides the
// expert gradients by ep, so that each parameter steps on the mean gradient of the tokens that
// reached it; the outer step then averages the dense parameters over dp and the experts over the
// expert-data group (replica_copies.h). With a linear inner update, H = 1 and plain averaging this
// is synchronous training again (tested at ep 2). Clipping acts on each rank's own (scaled) gradients.
#pragma once

#include "myriad/parallel/gradient_exchange.h"
#include "myriad/parallel/local_sgd.h"

namespace myriad::parallel {

class LocalSgdExchange final : public GradientExchange {
 public:
  // `units`: ReplicatedParameters, on the host or a device (make_gradient_exchange checks).
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
  int expert_share_;  // ep: the expert gradients are divided by it
};

}  // namespace myriad::parallel
