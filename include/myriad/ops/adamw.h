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
// Compute copies (16-bit training): the same pass may also write the weights the model computes
// with, so no separate cast pass follows the update: `copies.rounded` (f32, param's shape) = the
// updated param rounded to `copies.format` (bf16 or f16, round to nearest even, f16 saturating to
// infinities: round_to_format's values), and `copies.narrow` (dtype `copies.format`) = the same
// values as 16-bit numbers. Either may be undefined (not written); both contiguous, on param's
// device, disjoint from the other tensors.
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

struct AdamWCopies {
  DType format = DType::f32;  // bf16 or f16 whenever a copy is defined
  Tensor rounded;             // f32, the param's shape: the update rounded to format
  Tensor narrow;              // `format`, the param's shape: the same values in 16 bits
  bool any() const { return rounded.defined() || narrow.defined(); }
};

void adamw_update(const AdamWArgs& args, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                  const AdamWCopies& copies = {});
// sum of grad[i]^2 in float64 (grad f32, any shape), deterministic.
double grad_norm_squared(const Tensor& grad);
// grad_norm_squared of each tensor (all on one device), each bit for bit the single call's; a
// device backend reads them back in one transfer (one wait for the device, not one per tensor).
std::vector<double> grad_norms_squared(const std::vector<Tensor>& grads);

namespace cpu {
void adamw_update(const AdamWArgs& args, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                  const AdamWCopies& copies = {});
double grad_norm_squared(const Tensor& grad);
}  // namespace cpu

}  // namespace myriad
