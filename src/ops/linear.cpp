// Linear dispatch point (x W^T + b, optional GELU): validates shapes / dtypes / devices, then
// picks the backend.
#include "myriad/ops/linear.h"

#include "myriad/ops/activations.h"
#include "myriad/ops/backend.h"
#include "f32_operand.h"
#include "f32_output.h"
#include "myriad/ops/op_checks.h"

namespace myriad {

namespace {

bool is_sixteen_bit(DType d) { return d == DType::bf16 || d == DType::f16; }

// x (..., K) and weight (N, K): f32, or 16-bit operands of one format; out (..., N) f32 (or, with
// `out_16bit_allowed`, bf16 / f16: a kept GELU pre-activation or its gradient). Returns N.
std::int64_t check_operands(const char* op, const char* x_name, const Tensor& x, const Tensor& weight, bool x_by_out,
                            const char* out_name, const Tensor& out, bool out_16bit_allowed = false) {
  MYRIAD_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f16,
               op << ": " << x_name << " " << x.describe() << " must be f32, bf16 or f16");
  ops::check_dtype(op, "weight", weight, x.dtype());
  if (!(out_16bit_allowed && is_sixteen_bit(out.dtype()))) ops::check_dtype(op, out_name, out, DType::f32);
  ops::check_rank(op, "weight", weight, 2);
  // x W^T reduces x's last dim with the weight's in-features; x W (x_by_out) with its out-features.
  const std::int64_t reduced = x_by_out ? weight.size(0) : weight.size(1),
                     kept = x_by_out ? weight.size(1) : weight.size(0);
  MYRIAD_CHECK(x.dim() >= 1 && x.size(-1) == reduced, op << ": " << x_name << " " << x.describe() << " must end in "
                                                         << reduced << " (weight " << weight.describe() << ")");
  Shape out_shape = x.shape();
  out_shape.back() = kept;
  ops::check_shape(op, out_name, out, out_shape);
  ops::check_contiguous(op, x_name, x);
  ops::check_contiguous(op, "weight", weight);
  ops::check_contiguous(op, out_name, out);
  return kept;
}

void check_bias(const char* op, const char* name, const Tensor& bias, std::int64_t n) {
  if (!bias.defined()) return;
  ops::check_f32_contiguous(op, name, bias, {n});
}

}  // namespace

void linear_gelu_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& pre_activation, Tensor& y) {
  const char* op = "linear_gelu_forward";
  const std::int64_t n = check_operands(op, "x", x, weight, false, "pre_activation", pre_activation, true);
  ops::check_f32_or_16bit_output(op, "y", y, pre_activation.shape());
  MYRIAD_CHECK(!is_sixteen_bit(pre_activation.dtype()) || y.dtype() == pre_activation.dtype(),
               op << ": a " << dtype_name(pre_activation.dtype()) << " pre_activation needs y of its format, got "
                  << y.describe());
  check_bias(op, "bias", bias, n);
  const std::initializer_list<ops::NamedTensor> tensors = {
      {"x", &x}, {"weight", &weight}, {"bias", &bias}, {"pre_activation", &pre_activation}, {"y", &y}};
  if (ops::check_same_device(op, tensors).is_cpu()) {
    if (is_sixteen_bit(pre_activation.dtype())) {  // rounded once, then the GELU of the rounded value
      Tensor pre = Tensor::empty(pre_activation.shape());
      cpu::linear_forward(LinearArgs{}, ops::as_f32_operand(x), ops::as_f32_operand(weight), bias, pre);
      pre_activation.copy_from(pre);
      gelu_forward(GeluArgs{}, pre_activation, y);
      return;
    }
    return ops::compute_into_output(y, [&](Tensor& result) {
      cpu::linear_gelu_forward(ops::as_f32_operand(x), ops::as_f32_operand(weight), bias, pre_activation, result);
    });
  }
  ops::backend_of(op, tensors).linear_gelu_forward(x, weight, bias, pre_activation, y);
}

void linear_dgelu_backward(const Tensor& grad_y, const Tensor& weight, const Tensor& pre_activation, Tensor& grad_pre,
                           Tensor& grad_bias) {
  const char* op = "linear_dgelu_backward";
  const std::int64_t f = check_operands(op, "grad_y", grad_y, weight, true, "grad_pre", grad_pre, true);
  ops::check_dtype(op, "pre_activation", pre_activation, grad_pre.dtype());  // 16-bit: grad_pre of its format
  ops::check_shape(op, "pre_activation", pre_activation, grad_pre.shape());
  ops::check_contiguous(op, "pre_activation", pre_activation);
  check_bias(op, "grad_bias", grad_bias, f);
  const std::initializer_list<ops::NamedTensor> tensors = {{"grad_y", &grad_y},
                                                           {"weight", &weight},
                                                           {"pre_activation", &pre_activation},
                                                           {"grad_pre", &grad_pre},
                                                           {"grad_bias", &grad_bias}};
  if (ops::check_same_device(op, tensors).is_cpu()) {
    return cpu::linear_dgelu_backward(ops::as_f32_operand(grad_y), ops::as_f32_operand(weight), pre_activation,
                                      grad_pre, grad_bias);
  }
  ops::backend_of(op, tensors).linear_dgelu_backward(grad_y, weight, pre_activation, grad_pre, grad_bias);
}

void linear_forward(const LinearArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y) {
  const char* op = "linear_forward";
  // x and weight: f32, or 16-bit operands of one format (the products summed in f32); y, bias f32.
  MYRIAD_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f16,
               op << ": x " << x.describe() << " must be f32, bf16 or f16");
  ops::check_dtype(op, "weight", weight, x.dtype());
  MYRIAD_CHECK(y.dtype() == DType::f32 || y.dtype() == DType::bf16 || y.dtype() == DType::f16,
               op << ": y " << y.describe() << " must be f32, bf16 or f16");
  ops::check_rank(op, "weight", weight, 2);
  MYRIAD_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1),
               op << ": x " << x.describe() << " must end in the weight's in-features " << weight.size(1));
  Shape y_shape = x.shape();
  y_shape.back() = weight.size(0);
  ops::check_shape(op, "y", y, y_shape);
  if (bias.defined()) {
    ops::check_dtype(op, "bias", bias, DType::f32);
    ops::check_shape(op, "bias", bias, {weight.size(0)});
  }
  for (auto [name, t] : {std::pair<const char*, const Tensor*>{"x", &x}, {"weight", &weight}, {"y", &y}}) {
    ops::check_contiguous(op, name, *t);
  }
  if (bias.defined()) ops::check_contiguous(op, "bias", bias);
  const std::initializer_list<ops::NamedTensor> tensors = {{"x", &x}, {"weight", &weight}, {"bias", &bias}, {"y", &y}};
  Device device = ops::check_same_device(op, tensors);
  if (device.is_cpu()) {
    return ops::compute_into_output(y, [&](Tensor& result) {
      cpu::linear_forward(args, ops::as_f32_operand(x), ops::as_f32_operand(weight), bias, result);
    });
  }
  ops::backend_of(op, tensors).linear_forward(args, x, weight, bias, y);
}

}  // namespace myriad
