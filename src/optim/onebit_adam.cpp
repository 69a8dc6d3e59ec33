// onebit_adam_step: local momentum, compressed momentum sum, update with the frozen variance
// (see onebit_adam.h).
#include "myriad/optim/onebit_adam.h"

#include <cmath>

#include "myriad/core/error.h"

namespace myriad::optim {

OptimizerStepStats onebit_adam_step(AdamWOptimizer& adam, const OneBitAdamArgs& args,
                                    const std::function<void(Tensor& momentum)>& sum_momentum) {
  const AdamWConfig& config = adam.config();
  MYRIAD_CHECK(args.replicas >= 1 && args.freeze_step >= 1,
               "1-bit Adam: " << args.replicas << " replicas, freeze_step " << args.freeze_step);
  MYRIAD_CHECK(adam.m().device().is_cpu(), "1-bit Adam runs on host tensors (training.device cpu)");
  const OptimizerStepStats stats = clipping(config, args.global_sum_squares, args.unscale);
  if (stats.skipped) return stats;
  const float P = static_cast<float>(args.replicas);
  const float gain = (1.0f - config.beta1) * P * stats.clip_scale * args.unscale;
  float* m = adam.m().data<float>();
  std::int64_t offset = 0;
  for (const OptimizerSegment& s : adam.segments()) {
    const float* g = s.grad.data<float>();
    const std::int64_t n = s.grad.numel();
    for (std::int64_t i = 0; i < n; ++i) m[offset + i] = config.beta1 * m[offset + i] + gain * g[i];
    offset += n;
  }
  sum_momentum(adam.m());
  adam.set_steps_taken(adam.steps_taken() + 1);
  const double t = static_cast<double>(adam.steps_taken());
  const float bias1 = static_cast<float>(1.0 - std::pow(static_cast<double>(config.beta1), t));
  const float bias2 =
      static_cast<float>(1.0 - std::pow(static_cast<double>(config.beta2), static_cast<double>(args.freeze_step)));
  const float* v = adam.v().data<float>();
  const float inverse_p = 1.0f / P;
  offset = 0;
  for (OptimizerSegment& s : adam.segments()) {
    float* p = s.value.data<float>();
    const std::int64_t n = s.value.numel();
    const float decay = adam.decays(s.kind) ? args.lr * config.weight_decay : 0.0f;
    for (std::int64_t i = 0; i < n; ++i) {
      const float momentum = m[offset + i] * inverse_p;
      m[offset + i] = momentum;
      p[i] -= decay * p[i];
      p[i] -= args.lr * (momentum / bias1) / (std::sqrt(v[offset + i] / bias2) + config.eps);
    }
    offset += n;
  }
  return stats;
}

}  // namespace myriad::optim
