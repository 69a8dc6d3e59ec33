// Softmax dispatch point: validates shapes / dtypes / devices, then picks the backend.
#include "myriad/ops/softmax.h"

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"

namespace myriad {

void softmax_forward(const SoftmaxArgs& args, const Tensor& x, Tensor& out) {
  const char* op = "softmax_forward";
  ops::check_f32_rows(op, "x", x);
  ops::check_f32_contiguous(op, "out", out, x.shape());
  Device device = ops::check_same_device(op, {{"x", &x}, {"out", &out}});
  if (device.is_cpu()) return cpu::softmax_forward(args, x, out);
  ops::backend_of(op, {{"x", &x}, {"out", &out}}).softmax_forward(args, x, out);
}

void softmax_backward(const SoftmaxArgs& args, const Tensor& out, const Tensor& grad_out, Tensor& grad_x) {
  const char* op = "softmax_backward";
  ops::check_f32_rows(op, "out", out);
  ops::check_f32_contiguous(op, "grad_out", grad_out, out.shape());
  ops::check_f32_contiguous(op, "grad_x", grad_x, out.shape());
  Device device = ops::check_same_device(op, {{"out", &out}, {"grad_out", &grad_out}, {"grad_x", &grad_x}});
  if (device.is_cpu()) return cpu::softmax_backward(args, out, grad_out, grad_x);
  ops::backend_of(op, {{"out", &out}, {"grad_out", &grad_out}, {"grad_x", &grad_x}})
      .softmax_backward(args, out, grad_out, grad_x);
}

}  // namespace myriad
