// AdamW: one in-place optimizer update of a parameter from its gradient (Loshchilov & Hutter,
// decoupled weight decay). This is an update, not a forward/backward pair: nothing is
// differentiated and the param, m and v tensors are modified in place.
//
// Per element, with g = grad * grad_scale and t = step (1-based):
//   p -= lr * weight_decay * p                      (decoupled decay, on the pre-update p)
//   m  = beta1 * m + (1 - beta1) * g
//   v  = beta2 * v + (1 - beta2) * g^2
//   p -= lr * m_hat / (sqrt(v_hat) + eps)           m_hat = m / (1 - beta1^t), v_hat = v / (1 - beta2^t)
// Shapes: param, grad, m, v all the same shape (any), f32, contiguous, on one device. grad is
// read only; grad_scale folds in global-norm clipping (min(1, max_norm / norm)) and loss-scale
// unscaling (1 / scale) without a separate pass over the gradients. m and v start at zero.
//
// grad_norm_squared(grad) returns sum(grad^2) in float64 for global-norm clipping. It sums
// fixed-size blocks (independent of the thread count) and adds the block sums in order, so the
// value is bit-for-bit reproducible; callers add the per-tensor values (and all-reduce them
// across ranks, counting each parameter once) before taking the square root.
#pragma once

#include <cstdint>
#include <vector>

#include "myriad/core/tensor.h"

namespace myriad {

struct AdamWArgs {
  float lr = 0.0f;            // learning rate for this step (schedules are the caller's)
  float beta1 = 0.9f;         // first-moment decay, in [0, 1)
  float beta2 = 0.95f;        // second-moment decay, in [0, 1)
  float eps = 1e-8f;          // added to sqrt(v_hat), > 0
  float weight_decay = 0.0f;  // decoupled: p -= lr * weight_decay * p, >= 0
  std::int64_t step = 0;      // 1-based count of updates including this one (bias correction); 0 is rejected
  float grad_scale = 1.0f;    // grads are multiplied by this first (clipping, loss-scale unscaling)
};

void adamw_update(const AdamWArgs& args, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v);
// sum of grad[i]^2 in float64 (grad f32, any shape), deterministic.
double grad_norm_squared(const Tensor& grad);
// grad_norm_squared of each tensor (all on one device), each bit for bit the single call's; a
// device backend reads them back in one transfer (one wait for the device, not one per tensor).
std::vector<double> grad_norms_squared(const std::vector<Tensor>& grads);

namespace cpu {
void adamw_update(const AdamWArgs& args, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v);
double grad_norm_squared(const Tensor& grad);
}  // namespace cpu

}  // namespace myriad
