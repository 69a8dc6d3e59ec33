// Linear layer math: y = x @ W^T + b with W stored (out, in) as in GPT-2 / PyTorch.
//
//   x (N, K) or (B, T, K); W (M, K); b (M) or undefined; y (..., M)
// Gradient contract: dx is written (`=`) unless accumulate_dx; dW and db accumulate (`+=`).
// dx, db may be undefined to skip them.
//
// GEMM operands (`operands`: f32, or bf16 / f16 for mixed precision): with a 16-bit format the
// GEMM inputs — x and W forward; grad_y, x and W backward — are rounded to it (copies made where
// the tensors live) and the products summed in f32 (the matmul op's 16-bit path: tensor cores on a
// GPU); outputs, bias and gradients stay f32. The numbers are the same on every backend. A
// weight already in the format (a parameter's 16-bit operand: weight_operand) is used as it is.
#pragma once

#include <cstdint>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/nn/parameter_store.h"

namespace myriad::nn {

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y, DType operands = DType::f32);
// The same with a parameter as weight: its INT8 form when attached (f32 operands only), else its value.
void linear_forward(const Tensor& x, const Parameter& weight, const Tensor& bias, Tensor& y,
                    DType operands = DType::f32);
// One linear layer per group of consecutive rows (an MoE layer's experts; ops/grouped_matmul.h):
// rows [offsets[g], offsets[g + 1]) of out (R, M) = the same rows of x (R, K) @ W[g]^T, W the
// parameter (G, M, K) — its INT8 form when attached (grouped_linear.cpp: one int8 linear per
// non-empty group, f32 operands only), else its value in `operands` (the grouped matmul op);
// x is already in `operands` (gemm_operand), as the layer reuses it for several weights.
void grouped_linear_forward(const Tensor& x, const Parameter& weight, const std::vector<std::int64_t>& offsets,
                            Tensor& out, DType operands = DType::f32);
void linear_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_y, Tensor& grad_x, bool accumulate_dx,
                     Tensor& grad_weight, Tensor& grad_bias, DType operands = DType::f32);

// A GELU MLP's input layer with its activation (ops/linear.h: one GEMM with a GELU epilogue on a
// device): pre_activation = x W^T + b (kept for the backward), y = gelu(pre_activation); and the
// backward through the next layer y = a W2^T into the GELU's input: grad_pre = (grad_y W2) *
// gelu'(pre_activation), grad_bias += its column sums (the input layer's bias; may be undefined).
// The GEMM operands as in linear_forward / linear_backward (weight: a parameter's kept copy).
void linear_gelu_forward(const Tensor& x, const Parameter& weight, const Tensor& bias, Tensor& pre_activation,
                         Tensor& y, DType operands = DType::f32);
void linear_dgelu_backward(const Tensor& grad_y, const Parameter& weight, const Tensor& pre_activation,
                           Tensor& grad_pre, Tensor& grad_bias, DType operands = DType::f32);

// `t` as GEMM operands of `format`: t itself for f32 (or when it is in `format` already), else a
// copy rounded to the 16-bit format, made where t lives.
Tensor gemm_operand(const Tensor& t, DType format);
// A parameter as a GEMM weight operand of `format`: its value for f32, its kept 16-bit copy
// (Parameter::operand) when it has one in `format`, else gemm_operand of its value.
Tensor weight_operand(const Parameter& p, DType format);
// dst += src (same shape, contiguous f32).
void add_into(Tensor& dst, const Tensor& src);
// out[..., j] += bias[j] (out contiguous f32 (..., M), bias (M)).
void add_row_bias(Tensor& out, const Tensor& bias);
// out = a + b (same shape, contiguous f32; out may alias a or b).
void add(const Tensor& a, const Tensor& b, Tensor& out);

}  // namespace myriad::nn
