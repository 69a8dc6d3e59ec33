// Bias add dispatch point: validates shapes / dtypes / devices, then picks the backend.
#include "myriad/ops/bias_add.h"

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"
#include "f32_operand.h"

namespace myriad {

void bias_add_forward(const BiasAddArgs& args, const Tensor& x, const Tensor& bias, Tensor& out) {
  const char* op = "bias_add_forward";
  std::int64_t channels = ops::check_f32_rows(op, "x", x);
  ops::check_f32_contiguous(op, "bias", bias, {channels});
  ops::check_f32_contiguous(op, "out", out, x.shape());
  Device device = ops::check_same_device(op, {{"x", &x}, {"bias", &bias}, {"out", &out}});
  if (device.is_cpu()) return cpu::bias_add_forward(args, x, bias, out);
  ops::backend_of(op, {{"x", &x}, {"bias", &bias}, {"out", &out}}).bias_add_forward(args, x, bias, out);
}

void bias_add_backward(const BiasAddArgs& args, const Tensor& grad_out, Tensor& grad_x, Tensor& grad_bias) {
  const char* op = "bias_add_backward";
  const bool sixteen_bit = grad_out.dtype() == DType::bf16 || grad_out.dtype() == DType::f16;
  if (!sixteen_bit) ops::check_dtype(op, "grad_out", grad_out, DType::f32);
  MYRIAD_CHECK(grad_out.dim() >= 1 && grad_out.size(-1) >= 1,
               op << ": 'grad_out' has shape " << shape_string(grad_out.shape()) << ", expected (..., C) with C >= 1");
  ops::check_contiguous(op, "grad_out", grad_out);
  const std::int64_t channels = grad_out.size(-1);
  MYRIAD_CHECK(!sixteen_bit || !grad_x.defined(), op << ": a " << dtype_name(grad_out.dtype())
                                                     << " grad_out gives the bias gradient only (grad_x undefined)");
  if (grad_x.defined()) ops::check_f32_contiguous(op, "grad_x", grad_x, grad_out.shape());
  if (grad_bias.defined()) ops::check_f32_contiguous(op, "grad_bias", grad_bias, {channels});
  Device device = ops::check_same_device(op, {{"grad_out", &grad_out}, {"grad_x", &grad_x}, {"grad_bias", &grad_bias}});
  if (device.is_cpu()) return cpu::bias_add_backward(args, ops::as_f32_operand(grad_out), grad_x, grad_bias);
  ops::backend_of(op, {{"grad_out", &grad_out}, {"grad_x", &grad_x}, {"grad_bias", &grad_bias}})
      .bias_add_backward(args, grad_out, grad_x, grad_bias);
}

}  // namespace myriad
