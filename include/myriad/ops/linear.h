// Linear: y = x W^T + b, then optionally GPT-2's tanh-GELU — one op, so that a backend can fuse
// the bias and the activation into the GEMM (cuBLASLt's bias / bias+GELU epilogues).
//
//   x (..., K) contiguous, weight (N, K) contiguous (out features x in features, as GPT-2 and
//   PyTorch store it), bias (N) or undefined, y (..., N) contiguous; y and bias f32, x and weight
//   f32 or 16-bit operands of one format (bf16 / f16: the products summed in f32, as matmul's).
//
// There is no separate backward: the gradient of y = x W^T + b is matmul_backward plus
// bias_add_backward (and gelu_backward on the saved pre-activation, which a caller that needs it
// computes with gelu = false and gelu_forward). The CPU runs matmul, bias_add and gelu.
#pragma once

#include "myriad/core/tensor.h"

namespace myriad {

struct LinearArgs {
  bool gelu = false;  // y = gelu(x W^T + b)
};

void linear_forward(const LinearArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y);

namespace cpu {
void linear_forward(const LinearArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y);
}  // namespace cpu

}  // namespace myriad
