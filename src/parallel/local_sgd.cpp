// LocalSgd: pseudo-gradient all-reduce, outer Nesterov step, one-step-delayed variant and
// consolidation (see local_sgd.h), written over the elementwise ops so that it runs where the
// parameters live. Each axpby (out = alpha a + beta b) rounds exactly as the scalar expressions
// of the outer step written out per element (local_sgd.h), on the host and on a GPU alike.
#include "myriad/parallel/local_sgd.h"

#include "myriad/core/error.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/placement.h"

namespace myriad::parallel {

namespace {

// out = alpha a + beta b (b undefined: out = alpha a).
void axpby(float alpha, const Tensor& a, float beta, const Tensor& b, Tensor& out) {
  add_forward(AddArgs{.alpha = alpha, .beta = beta}, a, b, out);
}

}  // namespace

LocalSgd::LocalSgd(ReplicaCopies copies, ReplicaCopies moment_copies, Tensor values, const LocalSgdOptions& options)
    : copies_(std::move(copies)),
      moment_copies_(std::move(moment_copies)),
      values_(std::move(values)),
      options_(options) {
  MYRIAD_CHECK(values_.dtype() == DType::f32 && values_.is_contiguous(),
               "local SGD keeps contiguous f32 parameters, got " << values_.describe());
  MYRIAD_CHECK(options.local_steps >= 1, "training.local_steps " << options.local_steps << " must be >= 1");
  const ops::Placement placement = ops::placement_of(values_, "local SGD parameters");
  const std::int64_t n = values_.numel();
  anchor_ = placement.empty({n});
  copy(values_, anchor_);
  momentum_ = placement.zeros({n});
  delta_ = placement.zeros({n});
  if (options_.overlap) at_sync_ = placement.zeros({n});
}

LocalSgd::~LocalSgd() {
  try {
    for (distributed::WorkHandle& w : pending_) w->wait();
  } catch (...) {  // destructor: the failing rank reports the error
  }
}

void LocalSgd::reset_anchor() {
  for (distributed::WorkHandle& w : pending_) w->wait();
  pending_.clear();
  copy(values_, anchor_);
}

void LocalSgd::average(const ReplicaCopies& copies, Tensor& t) {
  for (distributed::WorkHandle& w : copies.start_sum(t)) w->wait_on_stream();
  copies.divide_by_copies(t);
}

void LocalSgd::after_inner_step(std::int64_t steps_taken) {
  if (!pending_.empty()) finish_outer();  // overlap: the previous sync's outer step, one inner step late
  if (steps_taken % options_.local_steps != 0) return;
  start_outer();
  if (!options_.overlap) finish_outer();
}

void LocalSgd::start_outer() {
  axpby(1.0f, anchor_, -1.0f, values_, delta_);  // this replica's pseudo-gradient
  if (options_.overlap) copy(values_, at_sync_);
  pending_ = copies_.start_sum(delta_);
}

void LocalSgd::finish_outer() {
  for (distributed::WorkHandle& w : pending_) w->wait_on_stream();
  pending_.clear();
  const float mu = options_.outer_momentum, lr = options_.outer_lr;
  Tensor& mean_delta = delta_;
  copies_.divide_by_copies(mean_delta);
  axpby(mu, momentum_, 1.0f, mean_delta, momentum_);  // b = mu b + mean delta
  Tensor& step = delta_;                              // mean delta + mu b, in place
  axpby(1.0f, mean_delta, mu, momentum_, step);
  Tensor& updated = delta_;  // anchor - lr (mean delta + mu b)
  axpby(1.0f, anchor_, -lr, step, updated);
  if (options_.overlap) {  // keep the progress made since the sync: updated + (theta - theta at the sync)
    axpby(1.0f, values_, -1.0f, at_sync_, values_);
    axpby(1.0f, values_, 1.0f, updated, values_);
  } else {
    copy(updated, values_);
  }
  copy(updated, anchor_);
  ++outer_steps_;
}

void LocalSgd::consolidate(Tensor& m, Tensor& v) {
  if (!pending_.empty()) finish_outer();
  average(copies_, values_);
  average(moment_copies_, m);
  average(moment_copies_, v);
  copy(values_, anchor_);
}

}  // namespace myriad::parallel
