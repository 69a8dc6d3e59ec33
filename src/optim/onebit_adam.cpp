// onebit_adam_step: local momentum, compressed momentum sum, update with the frozen variance
// (see onebit_adam.h).
#include "myriad/optim/onebit_adam.h"

#include <cmath>

#include "myriad/core/error.h"
#include "myriad/ops/onebit_adam_update.h"

namespace myriad::optim {

OptimizerStepStats onebit_adam_step(AdamWOptimizer& adam, const OneBitAdamArgs& args,
                                    const std::function<void(Tensor& momentum)>& sum_momentum) {
  const AdamWConfig& config = adam.config();
  MYRIAD_CHECK(args.replicas >= 1 && args.freeze_step >= 1,
               "1-bit Adam: " << args.replicas << " replicas, freeze_step " << args.freeze_step);
  const OptimizerStepStats stats = clipping(config, args.global_sum_squares, args.unscale);
  if (stats.skipped) return stats;
  const float P = static_cast<float>(args.replicas);
  const float gain = (1.0f - config.beta1) * P * stats.clip_scale * args.unscale;
  Tensor m = adam.m().view({adam.m().numel()}), v = adam.v().view({adam.v().numel()});
  std::int64_t offset = 0;
  for (const OptimizerSegment& s : adam.segments()) {  // m_r = beta1 m + gain g_r
    const std::int64_t n = s.grad.numel();
    Tensor segment_m = m.slice(0, offset, offset + n);
    onebit_adam_momentum(OneBitAdamMomentumArgs{.beta1 = config.beta1, .gain = gain}, segment_m, s.grad.view({n}));
    offset += n;
  }
  sum_momentum(adam.m());
  adam.set_steps_taken(adam.steps_taken() + 1);
  const double t = static_cast<double>(adam.steps_taken());
  OneBitAdamUpdateArgs update{.lr = args.lr,
                              .bias1 = static_cast<float>(1.0 - std::pow(static_cast<double>(config.beta1), t)),
                              .bias2 = static_cast<float>(1.0 - std::pow(static_cast<double>(config.beta2),
                                                                         static_cast<double>(args.freeze_step))),
                              .eps = config.eps,
                              .inverse_replicas = 1.0f / P};
  offset = 0;
  for (OptimizerSegment& s : adam.segments()) {
    const std::int64_t n = s.value.numel();
    update.decay = adam.decays(s.kind) ? args.lr * config.weight_decay : 0.0f;
    Tensor value = s.value.view({n}), segment_m = m.slice(0, offset, offset + n);
    onebit_adam_update(update, value, segment_m, v.slice(0, offset, offset + n));
    offset += n;
  }
  return stats;
}

}  // namespace myriad::optim
