// Linear: y = x W^T + b, then optionally GPT-2's tanh-GELU — one op, so that a backend can fuse
// the bias and the activation into the GEMM (cuBLASLt's bias / bias+GELU epilogues).
//
//   x (..., K) contiguous, weight (N, K) contiguous (out features x in features, as GPT-2 and
//   PyTorch store it), bias (N) or undefined, y (..., N) contiguous; bias f32, x and weight f32 or
//   16-bit operands of one format (bf16 / f16: the products summed in f32, as matmul's); y f32, or
//   bf16 / f16 (an activation kept in the format: the f32 result, bias and GELU included, rounded
//   once to nearest even).
//
// There is no separate backward: the gradient of y = x W^T + b is matmul_backward plus
// bias_add_backward (and gelu_backward on the saved pre-activation, which a caller that needs it
// computes with gelu = false and gelu_forward). The CPU runs matmul, bias_add and gelu.
//
// A GELU MLP's training pair, each one op so that a backend fuses its epilogue:
// linear_gelu_forward: pre_activation = x W^T + b (the GELU's input, kept for the backward) and
//   y = gelu(pre_activation), both written (`=`); types as linear_forward, pre_activation f32
//   (cuBLASLt's GELU_AUX_BIAS epilogue: y is the GEMM's output, pre_activation its aux output).
//   y may instead be bf16 / f16 (a GEMM operand kept for the next layer and its backward): the
//   f32 GELU rounded once, to nearest even — on a device the GEMM with the bias epilogue and the
//   GELU kernel writing 16 bits. With such a y, pre_activation may be of y's format too (mixed
//   precision keeps it at half the bytes, as PyTorch's autocast keeps a linear layer's output):
//   the f32 pre-activation rounded once, and y the GELU of that rounded value, so the GELU
//   recomputed from the kept pre-activation gives y again.
// linear_dgelu_backward: for an MLP whose GELU output `a` feeds the linear layer y = a W^T:
//   grad_pre = (grad_y W) * gelu'(pre_activation) (written), grad_bias += column sums of grad_pre
//   (the bias of the layer before the GELU; undefined to skip). grad_y (..., N) and weight (N, F)
//   f32 or 16-bit operands of one format, pre_activation and grad_pre (..., F) f32 (cuBLASLt's
//   DGELU_BGRAD epilogue: the bias gradient written to a scratch vector, then added) — or both of
//   one 16-bit format: pre_activation read widened, grad_pre the f32 value rounded once, the bias
//   gradient the column sums of the rounded values.
// The CPU runs matmul, bias_add and gelu (forward and backward) as above, bit for bit the
// unfused sequence.
#pragma once

#include "myriad/core/tensor.h"

namespace myriad {

struct LinearArgs {
  bool gelu = false;  // y = gelu(x W^T + b)
};

void linear_forward(const LinearArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y);
void linear_gelu_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& pre_activation, Tensor& y);
void linear_dgelu_backward(const Tensor& grad_y, const Tensor& weight, const Tensor& pre_activation, Tensor& grad_pre,
                           Tensor& grad_bias);

namespace cpu {
void linear_forward(const LinearArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y);
void linear_gelu_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& pre_activation, Tensor& y);
void linear_dgelu_backward(const Tensor& grad_y, const Tensor& weight, const Tensor& pre_activation, Tensor& grad_pre,
                           Tensor& grad_bias);
}  // namespace cpu

}  // namespace myriad
