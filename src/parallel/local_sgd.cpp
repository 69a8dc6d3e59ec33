// LocalSgd: pseudo-gradient all-reduce, outer Nesterov step, one-step-delayed variant and
// consolidation (see local_sgd.h).
#include "myriad/parallel/local_sgd.h"

#include <cstring>

#include "myriad/core/error.h"

namespace myriad::parallel {

LocalSgd::LocalSgd(distributed::Communicator& replicas, Tensor values, const LocalSgdOptions& options)
    : replicas_(replicas), values_(std::move(values)), options_(options) {
  MYRIAD_CHECK(values_.device().is_cpu() && values_.dtype() == DType::f32 && values_.is_contiguous(),
               "local SGD keeps host f32 parameters (training.device cpu)");
  MYRIAD_CHECK(options.local_steps >= 1, "training.local_steps " << options.local_steps << " must be >= 1");
  const std::int64_t n = values_.numel();
  anchor_ = values_.clone();
  momentum_ = Tensor::zeros({n});
  delta_ = Tensor::zeros({n});
  if (options_.overlap) at_sync_ = Tensor::zeros({n});
}

LocalSgd::~LocalSgd() {
  if (!pending_) return;
  try {
    pending_->wait();
  } catch (...) {  // destructor: the failing rank reports the error
  }
}

void LocalSgd::reset_anchor() {
  if (pending_) pending_->wait();
  pending_.reset();
  std::memcpy(anchor_.data<float>(), values_.data<float>(), values_.nbytes());
}

void LocalSgd::average(Tensor& t) {
  replicas_.all_reduce(t);
  const float inverse = 1.0f / static_cast<float>(replicas_.size());
  float* p = t.data<float>();
  const std::int64_t n = t.numel();
  for (std::int64_t i = 0; i < n; ++i) p[i] *= inverse;
}

void LocalSgd::after_inner_step(std::int64_t steps_taken) {
  if (pending_) finish_outer();  // overlap: the previous sync's outer step, one inner step late
  if (steps_taken % options_.local_steps != 0) return;
  start_outer();
  if (!options_.overlap) finish_outer();
}

void LocalSgd::start_outer() {
  const float* theta = values_.data<float>();
  const float* anchor = anchor_.data<float>();
  float* delta = delta_.data<float>();
  const std::int64_t n = values_.numel();
  for (std::int64_t i = 0; i < n; ++i) delta[i] = anchor[i] - theta[i];
  if (options_.overlap) std::memcpy(at_sync_.data<float>(), theta, values_.nbytes());
  pending_ = replicas_.all_reduce_async(delta_);
}

void LocalSgd::finish_outer() {
  pending_->wait();
  pending_.reset();
  const float inverse = 1.0f / static_cast<float>(replicas_.size());
  const float mu = options_.outer_momentum, lr = options_.outer_lr;
  float* theta = values_.data<float>();
  float* anchor = anchor_.data<float>();
  float* b = momentum_.data<float>();
  const float* delta = delta_.data<float>();
  const float* at_sync = options_.overlap ? at_sync_.data<float>() : nullptr;
  const std::int64_t n = values_.numel();
  for (std::int64_t i = 0; i < n; ++i) {
    const float mean_delta = delta[i] * inverse;
    b[i] = mu * b[i] + mean_delta;
    const float updated = anchor[i] - lr * (mean_delta + mu * b[i]);
    theta[i] = at_sync ? updated + (theta[i] - at_sync[i]) : updated;
    anchor[i] = updated;
  }
  ++outer_steps_;
}

void LocalSgd::consolidate(Tensor& m, Tensor& v) {
  if (pending_) finish_outer();
  average(values_);
  average(m);
  average(v);
  std::memcpy(anchor_.data<float>(), values_.data<float>(), values_.nbytes());
}

}  // namespace myriad::parallel
