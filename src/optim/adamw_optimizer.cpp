// AdamWOptimizer: global norm, clipping, per-parameter AdamW updates with decay exclusions.
#include "myriad/optim/adamw_optimizer.h"

#include <algorithm>
#include <cmath>

#include "myriad/ops/adamw.h"

namespace myriad::optim {

AdamWOptimizer::AdamWOptimizer(nn::ParameterStore& store, const AdamWConfig& config)
    : store_(store), config_(config) {
  MYRIAD_CHECK(store.allocated(), "AdamWOptimizer: parameters must be allocated first");
  m_ = Tensor::zeros(store.flat_values().shape());
  v_ = Tensor::zeros(store.flat_values().shape());
}

bool AdamWOptimizer::decays(const nn::Parameter& p) const {
  return std::find(config_.no_decay.begin(), config_.no_decay.end(), p.kind) == config_.no_decay.end();
}

OptimizerStepStats AdamWOptimizer::step(float lr) {
  OptimizerStepStats stats;
  double sum_squares = 0.0;
  for (const nn::Parameter& p : store_.all()) sum_squares += grad_norm_squared(p.grad);
  stats.grad_norm = std::sqrt(sum_squares);
  if (!std::isfinite(stats.grad_norm)) {
    stats.skipped = true;
    return stats;
  }
  if (config_.grad_clip > 0.0f && stats.grad_norm > config_.grad_clip) {
    stats.clip_scale = static_cast<float>(config_.grad_clip / stats.grad_norm);
  }
  ++steps_;
  for (nn::Parameter& p : store_.all()) {
    AdamWArgs args{.lr = lr, .beta1 = config_.beta1, .beta2 = config_.beta2, .eps = config_.eps,
                   .weight_decay = decays(p) ? config_.weight_decay : 0.0f, .step = steps_,
                   .grad_scale = stats.clip_scale};
    Tensor m = Tensor::from_storage(m_.storage(), p.shape, contiguous_strides(p.shape), p.offset, DType::f32);
    Tensor v = Tensor::from_storage(v_.storage(), p.shape, contiguous_strides(p.shape), p.offset, DType::f32);
    adamw_update(args, p.value, p.grad, m, v);
  }
  return stats;
}

}  // namespace myriad::optim
