// 1-bit Adam's compressed phase (Tang et al., 2021): after `freeze_step` exact AdamW steps the
// second moment v is frozen (it changes slowly once training settles) and only the momentum is
// exchanged, compressed to signs with error feedback (distributed::CompressedSum).
//
// One step, over an AdamWOptimizer's segments and packed moments, with each rank's LOCAL
// (unreduced) gradients g_r of P replicas whose sum is the global gradient:
//   norm   = sqrt(P * sum_r |g_r|^2) (the caller's global_sum_squares; each P g_r estimates the
//            global gradient), clipped as AdamW does; a non-finite norm skips the step (on every
//            rank alike: the norm is a sum over ranks)
//   m_r    = beta1 * m + (1 - beta1) * P * clip * unscale * g_r
//   m      = (1 / P) * sum_momentum(m_r)      the caller's compressed sum over the replicas
//   p     -= lr * weight_decay * p            (decoupled, as AdamW; skipped for no_decay kinds)
//   p     -= lr * (m / (1 - beta1^t)) / (sqrt(v / (1 - beta2^freeze_step)) + eps)
// With an exact sum_momentum this is Adam with v frozen at freeze_step (tested that way). Written
// over the ops (ops/onebit_adam_update.h: the momentum and the update), so it runs
// where the optimizer's state lives: the host or a device backend, with the same roundings.
#pragma once

#include <cstdint>
#include <functional>

#include "myriad/optim/adamw_optimizer.h"

namespace myriad::optim {

struct OneBitAdamArgs {
  float lr = 0.0f;
  double global_sum_squares = 0.0;  // P * sum over ranks of |g_r|^2 (see above)
  float unscale = 1.0f;
  int replicas = 1;              // P
  std::int64_t freeze_step = 0;  // exact steps taken before the compressed phase
};

OptimizerStepStats onebit_adam_step(AdamWOptimizer& adam, const OneBitAdamArgs& args,
                                    const std::function<void(Tensor& momentum)>& sum_momentum);

}  // namespace myriad::optim
