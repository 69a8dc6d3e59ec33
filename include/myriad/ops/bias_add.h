// Bias add: out[n, c] = x[n, c] + bias[c], the bias of a linear layer kept apart from the GEMM.
//
// Shapes: x and out (N, C) or with several leading dims, e.g. (B, T, C); all leading dims are
// rows, N = numel / C. bias (C). Every tensor is contiguous f32 (on the CPU). out may alias x
// (in-place add).
//
// Gradient contract: grad_x is written (`=`, a copy of grad_out; optional, and may alias
// grad_out, in which case nothing is copied); grad_bias accumulates (`+=`) the column sums of
// grad_out (optional). The column sums use a fixed chunking of the rows that depends only on
// N, so they are bit-identical for any number of threads. grad_out may be bf16 / f16 when grad_x
// is not asked for (mixed precision's gradients kept in a GEMM operand format): its values,
// widened exactly, summed in f32.
#pragma once

#include "myriad/core/tensor.h"

namespace myriad {

struct BiasAddArgs {};  // no options; kept so every op has the same argument-struct signature

void bias_add_forward(const BiasAddArgs& args,
                      const Tensor& x,     // (N, C)
                      const Tensor& bias,  // (C)
                      Tensor& out);        // (N, C)
void bias_add_backward(const BiasAddArgs& args,
                       const Tensor& grad_out,  // (N, C)
                       Tensor& grad_x,          // (N, C)  =
                       Tensor& grad_bias);      // (C)     +=

namespace cpu {
void bias_add_forward(const BiasAddArgs& args, const Tensor& x, const Tensor& bias, Tensor& out);
void bias_add_backward(const BiasAddArgs& args, const Tensor& grad_out, Tensor& grad_x, Tensor& grad_bias);
}  // namespace cpu

}  // namespace myriad
