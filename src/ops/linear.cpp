// Linear dispatch point (x W^T + b, optional GELU): validates shapes / dtypes / devices, then
// picks the backend.
#include "myriad/ops/linear.h"

#include "myriad/ops/backend.h"
#include "f32_operand.h"
#include "myriad/ops/op_checks.h"

namespace myriad {

void linear_forward(const LinearArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y) {
  const char* op = "linear_forward";
  // x and weight: f32, or 16-bit operands of one format (the products summed in f32); y, bias f32.
  MYRIAD_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f16,
               op << ": x " << x.describe() << " must be f32, bf16 or f16");
  ops::check_dtype(op, "weight", weight, x.dtype());
  ops::check_dtype(op, "y", y, DType::f32);
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
  if (device.is_cpu()) return cpu::linear_forward(args, ops::as_f32_operand(x), ops::as_f32_operand(weight), bias, y);
  ops::backend_of(op, tensors).linear_forward(args, x, weight, bias, y);
}

}  // namespace myriad
