// Softmax dispatch point: validates shapes / dtypes / devices, then picks the backend.
#include "myriad/ops/softmax.h"

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"

namespace myriad {

namespace {

// A contiguous f32 tensor with at least one dim and a non-empty last dim.
void check_rows_input(const char* op, const char* name, const Tensor& t) {
  ops::check_dtype(op, name, t, DType::f32);
  MYRIAD_CHECK(t.dim() >= 1 && t.size(-1) >= 1, op << ": '" << name << "' has shape " << shape_string(t.shape())
                                                   << ", expected (N, L) or (..., L) with L >= 1");
  ops::check_contiguous(op, name, t);
}

void check_like(const char* op, const char* name, const Tensor& t, const Tensor& like) {
  ops::check_dtype(op, name, t, DType::f32);
  ops::check_shape(op, name, t, like.shape());
  ops::check_contiguous(op, name, t);
}

}  // namespace

void softmax_forward(const SoftmaxArgs& args, const Tensor& x, Tensor& out) {
  const char* op = "softmax_forward";
  check_rows_input(op, "x", x);
  check_like(op, "out", out, x);
  Device device = ops::check_same_device(op, {{"x", &x}, {"out", &out}});
  if (device.is_cpu()) return cpu::softmax_forward(args, x, out);
  ops::backend_of(op, {{"x", &x}, {"out", &out}}).softmax_forward(args, x, out);
}

void softmax_backward(const SoftmaxArgs& args, const Tensor& out, const Tensor& grad_out, Tensor& grad_x) {
  const char* op = "softmax_backward";
  check_rows_input(op, "out", out);
  check_like(op, "grad_out", grad_out, out);
  check_like(op, "grad_x", grad_x, out);
  Device device = ops::check_same_device(op, {{"out", &out}, {"grad_out", &grad_out}, {"grad_x", &grad_x}});
  if (device.is_cpu()) return cpu::softmax_backward(args, out, grad_out, grad_x);
  ops::backend_of(op, {{"out", &out}, {"grad_out", &grad_out}, {"grad_x", &grad_x}})
      .softmax_backward(args, out, grad_out, grad_x);
}

}  // namespace myriad
