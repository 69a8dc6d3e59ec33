// LocalSgd — local-SGD / DiLoCo-style training over the data-parallel replicas
// (training.sync: local).
//
// Each replica takes `local_steps` (H) inner optimizer steps on its own gradients, with its own
// AdamW moments; then the outer step, over the replicas' pseudo-gradients Δ_r = anchor - θ_r:
//   Δ = mean_r Δ_r                       (one all-reduce of the flat parameters every H steps)
// where r runs over the copies of each element (replica_copies.h): at ep 1 the dp replicas; at
// ep > 1 the dense elements' over dp and the expert elements' over the expert-data group (one
// all-reduce per bucket), since the ranks of an ep group hold different experts.
//   b = μ b + Δ                          (outer Nesterov momentum, identical on every replica)
//   θ = anchor - outer_lr (Δ + μ b);  anchor = θ
// With outer_lr 1 and μ 0 this is plain parameter averaging. overlap (one-step-delayed, the
// "asynchronous" variant): the all-reduce runs while each replica takes its next inner step; the
// outer step is applied after that step, keeping the replica's progress made meanwhile:
//   θ = θ_new + (θ - θ_at_sync),  anchor = θ_new.
// consolidate() makes every replica hold the same state (a checkpoint, the end of a run): the
// delayed outer step is applied, then θ and the AdamW moments are averaged and anchor = θ. The
// outer state that must survive a restart is the momentum b (checkpointed); anchor = θ after a
// consolidation or a load. Flat buffers where the parameters live (the parameter store's flat layout;
// padding stays 0): the host, or a GPU (the all-reduce over NCCL, the outer step as device ops).
#pragma once

#include <cstdint>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/distributed/communicator.h"
#include "myriad/parallel/replica_copies.h"

namespace myriad::parallel {

struct LocalSgdOptions {
  int local_steps = 16;   // H
  float outer_lr = 0.7f;  // DiLoCo's
  float outer_momentum = 0.9f;
  bool overlap = false;
};

class LocalSgd {
 public:
  // `values`: the replica's flat parameters (f32, host or device), modified in place by the outer
  // step; `copies`: the groups over which its elements are averaged; `moment_copies`: the same
  // over the AdamW moments that consolidate() averages (laid out as the optimizer packs them).
  LocalSgd(ReplicaCopies copies, ReplicaCopies moment_copies, Tensor values, const LocalSgdOptions& options);
  ~LocalSgd();

  // After the replica's inner step number `steps_taken` (every replica at the same count): the
  // delayed outer step of the previous sync (overlap), then a new one when steps_taken % H == 0.
  void after_inner_step(std::int64_t steps_taken);
  // Every replica ends with the same parameters and moments (collective over the replicas).
  void consolidate(Tensor& m, Tensor& v);
  // After the parameters were loaded: anchor = values, nothing pending.
  void reset_anchor();
  Tensor& outer_momentum() { return momentum_; }
  std::int64_t outer_steps() const { return outer_steps_; }
  const LocalSgdOptions& options() const { return options_; }

 private:
  void start_outer();
  void finish_outer();
  // t <- mean over each element's copies (all-reduce, then / P)
  static void average(const ReplicaCopies& copies, Tensor& t);

  ReplicaCopies copies_, moment_copies_;
  Tensor values_, anchor_, momentum_, delta_, at_sync_;
  LocalSgdOptions options_;
  std::vector<distributed::WorkHandle> pending_;  // the pseudo-gradient sums in flight
  std::int64_t outer_steps_ = 0;
};

}  // namespace myriad::parallel
