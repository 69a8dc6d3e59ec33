// 1-bit Adam's two elementwise passes (optim/onebit_adam.h), in-place optimizer updates like
// ops/adamw.h, nothing differentiated.
//   onebit_adam_momentum: m = beta1 * m + gain * grad      (the rank's local momentum; grad read only)
//   onebit_adam_update, after the momenta of P replicas were summed into m:
//   m  = m * inverse_replicas                                   (the mean momentum, kept)
//   p -= decay * p                                              (decoupled; decay = lr * weight_decay or 0)
//   p -= lr * (m / bias1) / (sqrt(v / bias2) + eps)             bias1 = 1 - beta1^t, bias2 = 1 - beta2^freeze_step
// each operation rounded to f32 in that order (no fused multiply-adds: the CUDA kernel gives the
// CPU's bits). Shapes: param, m, v (grad) the same (any), contiguous f32 on one device.
#pragma once

#include "myriad/core/tensor.h"

namespace myriad {

struct OneBitAdamUpdateArgs {
  float lr = 0.0f;
  float decay = 0.0f;  // lr * weight_decay, or 0 for parameters without decay
  float bias1 = 1.0f;  // 1 - beta1^t, > 0
  float bias2 = 1.0f;  // 1 - beta2^freeze_step, > 0
  float eps = 1e-8f;
  float inverse_replicas = 1.0f;  // 1 / P
};

struct OneBitAdamMomentumArgs {
  float beta1 = 0.9f;
  float gain = 0.1f;  // (1 - beta1) * P * clip * unscale
};

void onebit_adam_momentum(const OneBitAdamMomentumArgs& args, Tensor& m, const Tensor& grad);
void onebit_adam_update(const OneBitAdamUpdateArgs& args, Tensor& param, Tensor& m, const Tensor& v);

namespace cpu {
void onebit_adam_momentum(const OneBitAdamMomentumArgs& args, Tensor& m, const Tensor& grad);
void onebit_adam_update(const OneBitAdamUpdateArgs& args, Tensor& param, Tensor& m, const Tensor& v);
}  // namespace cpu

}  // namespace myriad
