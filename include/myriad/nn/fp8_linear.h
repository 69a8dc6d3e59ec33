// A linear layer on FP8 GEMMs (training.precision fp8): y = x W^T + b as nn/linear.h, with the
// three products of forward and backward taking FP8 operands under the layer's delayed scales
// (nn/fp8_scaling.h: x and W in E4M3, the output gradient in E5M2; products summed in f32):
//
//   forward  y  = (xq Wq^T) / (s_x s_w) + b
//   backward dx = (dyq Wq)  / (s_dy s_w)        dW += (dyq^T xq) / (s_dy s_x)       db += sum dy
//
// Each GEMM reads both operands reduced along their last dim (ops/fp8.h), so the backward
// quantises W and x transposed as well (the forward's x is not kept in FP8: the backward
// re-quantises the saved f32 x with the step's same scale, bit for bit the forward's values).
// x (..., K) and dy (..., M) contiguous f32; W (M, K) f32; y, dx f32; dx written (`=`) unless
// accumulate_dx, dW and db accumulate (`+=`); dx, dW and db may be undefined to skip them.
#pragma once

#include <cstdint>

#include "myriad/core/tensor.h"
#include "myriad/nn/fp8_scaling.h"

namespace myriad::nn {

void fp8_linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y, Fp8Scaling& scaling,
                        std::int64_t linear);

// A weight quantised once for the GEMMs of one layer's blocks of rows (a sequence-parallel ring
// runs the layer block by block): its E4M3 codes — row-major for the forward, transposed for the
// input gradient — and the step's dequantisation factor (1 / its scale, one f32 on the placement,
// read by the GEMM when it runs). Bit for bit what each block's own quantisation gives.
struct Fp8Weight {
  Tensor codes;
  Tensor dequant;
  bool transposed = false;
};
Fp8Weight fp8_quantize_weight(const Tensor& weight, bool transposed, Fp8Scaling& scaling, std::int64_t linear);
// fp8_linear_forward with the weight quantised already (not transposed).
void fp8_linear_forward(const Tensor& x, const Fp8Weight& weight, const Tensor& bias, Tensor& y, Fp8Scaling& scaling,
                        std::int64_t linear);
// The input gradient alone, dx (=, or += when accumulate_dx) = (dyq Wq) / (s_dy s_w), with the
// weight quantised already (transposed).
void fp8_linear_input_grad(const Tensor& grad_y, const Fp8Weight& weight, Tensor& grad_x, bool accumulate_dx,
                           Fp8Scaling& scaling, std::int64_t linear);
void fp8_linear_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_y, Tensor& grad_x,
                         bool accumulate_dx, Tensor& grad_weight, Tensor& grad_bias, Fp8Scaling& scaling,
                         std::int64_t linear);

}  // namespace myriad::nn
