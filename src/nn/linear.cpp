// Linear layers on matmul + bias_add; residual adds on the elementwise ops (any backend).
#include "myriad/nn/linear.h"

#include "myriad/ops/bias_add.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/int8_linear.h"
#include "myriad/ops/linear.h"
#include "myriad/ops/matmul.h"
#include "myriad/ops/placement.h"

namespace myriad::nn {

Tensor gemm_operand(const Tensor& t, DType format) {
  if (format == DType::f32 || t.dtype() == format) return t;
  Tensor out = ops::placement_of(t, "operand").empty(t.shape(), format);
  copy(t, out);
  return out;
}

Tensor weight_operand(const Parameter& p, DType format) {
  if (format != DType::f32 && p.operand.defined() && p.operand.dtype() == format) return p.operand;
  return gemm_operand(p.value, format);
}

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y, DType operands) {
  if (operands == DType::f32) {
    myriad::linear_forward(LinearArgs{}, x, weight, bias, y);  // the bias fused into the GEMM on a device
    return;
  }
  // One GEMM with the bias as its epilogue on a device (the CPU adds it after, as add_row_bias).
  myriad::linear_forward(LinearArgs{}, gemm_operand(x, operands), gemm_operand(weight, operands), bias, y);
}

void linear_forward(const Tensor& x, const Parameter& weight, const Tensor& bias, Tensor& y, DType operands) {
  if (!weight.int8_values.defined()) return linear_forward(x, weight_operand(weight, operands), bias, y, operands);
  MYRIAD_CHECK(operands == DType::f32, "linear '" << weight.name << "': an INT8 weight computes with f32 activations, "
                                                  << "not " << dtype_name(operands) << " GEMM operands");
  int8_linear_forward(Int8Args{.group_size = weight.int8_group}, x, weight.int8_values, weight.int8_scales, bias, y);
}

void linear_gelu_forward(const Tensor& x, const Parameter& weight, const Tensor& bias, Tensor& pre_activation,
                         Tensor& y, DType operands) {
  myriad::linear_gelu_forward(gemm_operand(x, operands), weight_operand(weight, operands), bias, pre_activation, y);
}

void linear_dgelu_backward(const Tensor& grad_y, const Parameter& weight, const Tensor& pre_activation,
                           Tensor& grad_pre, Tensor& grad_bias, DType operands) {
  myriad::linear_dgelu_backward(gemm_operand(grad_y, operands), weight_operand(weight, operands), pre_activation,
                                grad_pre, grad_bias);
}

void linear_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_y, Tensor& grad_x, bool accumulate_dx,
                     Tensor& grad_weight, Tensor& grad_bias, DType operands) {
  MatmulArgs args{.transpose_b = true, .accumulate_grad_a = accumulate_dx, .accumulate_grad_b = true};
  if (operands == DType::f32) {
    matmul_backward(args, x, weight, grad_y, grad_x, grad_weight);
  } else {
    matmul_backward(args, gemm_operand(x, operands), gemm_operand(weight, operands), gemm_operand(grad_y, operands),
                    grad_x, grad_weight);
  }
  if (grad_bias.defined()) {
    Tensor no_grad_x;
    bias_add_backward(BiasAddArgs{}, grad_y, no_grad_x, grad_bias);
  }
}

void add_into(Tensor& dst, const Tensor& src) { add_forward(AddArgs{}, dst, src, dst); }

void add_row_bias(Tensor& out, const Tensor& bias) { bias_add_forward(BiasAddArgs{}, out, bias, out); }

void add(const Tensor& a, const Tensor& b, Tensor& out) { add_forward(AddArgs{}, a, b, out); }

}  // namespace myriad::nn
