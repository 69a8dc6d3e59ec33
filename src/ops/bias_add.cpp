// Bias add dispatch point: validates shapes / dtypes / devices, then picks the backend.
#include "myriad/ops/bias_add.h"

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"

namespace myriad {

namespace {

// x-like: contiguous f32 with at least one dim and a non-empty last dim; returns C.
std::int64_t check_rows_input(const char* op, const char* name, const Tensor& t) {
  ops::check_dtype(op, name, t, DType::f32);
  MYRIAD_CHECK(t.dim() >= 1 && t.size(-1) >= 1, op << ": '" << name << "' has shape " << shape_string(t.shape())
                                                   << ", expected (N, C) or (..., C) with C >= 1");
  ops::check_contiguous(op, name, t);
  return t.size(-1);
}

void check_tensor(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  ops::check_dtype(op, name, t, DType::f32);
  ops::check_shape(op, name, t, shape);
  ops::check_contiguous(op, name, t);
}

}  // namespace

void bias_add_forward(const BiasAddArgs& args, const Tensor& x, const Tensor& bias, Tensor& out) {
  const char* op = "bias_add_forward";
  std::int64_t channels = check_rows_input(op, "x", x);
  check_tensor(op, "bias", bias, {channels});
  check_tensor(op, "out", out, x.shape());
  Device device = ops::check_same_device(op, {{"x", &x}, {"bias", &bias}, {"out", &out}});
  if (device.is_cpu()) return cpu::bias_add_forward(args, x, bias, out);
  ops::backend_of(op, {{"x", &x}, {"bias", &bias}, {"out", &out}}).bias_add_forward(args, x, bias, out);
}

void bias_add_backward(const BiasAddArgs& args, const Tensor& grad_out, Tensor& grad_x, Tensor& grad_bias) {
  const char* op = "bias_add_backward";
  std::int64_t channels = check_rows_input(op, "grad_out", grad_out);
  if (grad_x.defined()) check_tensor(op, "grad_x", grad_x, grad_out.shape());
  if (grad_bias.defined()) check_tensor(op, "grad_bias", grad_bias, {channels});
  Device device = ops::check_same_device(op, {{"grad_out", &grad_out}, {"grad_x", &grad_x}, {"grad_bias", &grad_bias}});
  if (device.is_cpu()) return cpu::bias_add_backward(args, grad_out, grad_x, grad_bias);
  ops::backend_of(op, {{"grad_out", &grad_out}, {"grad_x", &grad_x}, {"grad_bias", &grad_bias}})
      .bias_add_backward(args, grad_out, grad_x, grad_bias);
}

}  // namespace myriad
