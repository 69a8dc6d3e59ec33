// Softmax over the last dimension, numerically stable.
//
//   out[n, l] = exp(x[n, l] - max_l x[n, :]) / sum_l' exp(x[n, l'] - max_l x[n, :])
//
// Shapes: x (N, L) or with several leading dims, e.g. attention scores (B, H, T, T); all
// leading dims are rows, N = numel / L, L >= 1. Every tensor is contiguous f32 (on the CPU) and
// has x's shape. Subtracting the row maximum keeps exp() in range for any finite input (e.g.
// logits of magnitude 1e3); -inf entries (masked positions) get probability 0 as long as one
// entry of the row is finite. out may alias x (in-place), grad_x may alias grad_out.
//
// Backward uses the saved output: grad_x = out * (grad_out - sum_l(grad_out * out)).
// Gradient contract: no parameters; the activation grad is written (`grad_x =`).
#pragma once

#include "myriad/core/tensor.h"

namespace myriad {

struct SoftmaxArgs {};  // no options; kept so every op has the same argument-struct signature

void softmax_forward(const SoftmaxArgs& args,
                     const Tensor& x,  // (N, L)
                     Tensor& out);     // (N, L)
void softmax_backward(const SoftmaxArgs& args,
                      const Tensor& out,       // (N, L) forward's output
                      const Tensor& grad_out,  // (N, L)
                      Tensor& grad_x);         // (N, L)  =

namespace cpu {
void softmax_forward(const SoftmaxArgs& args, const Tensor& x, Tensor& out);
void softmax_backward(const SoftmaxArgs& args, const Tensor& out, const Tensor& grad_out, Tensor& grad_x);
}  // namespace cpu

}  // namespace myriad
