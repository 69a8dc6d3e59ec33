// RoPE dispatch point: validates shapes / strides / dtypes / devices, then picks the backend.
#include "myriad/ops/rope.h"

#include <cmath>

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"
#include "f32_output.h"

namespace myriad {

namespace {

// `sixteen_bit_out`: the forward's out may be bf16 / f16 (mixed precision's kept attention input);
// `sixteen_bit_in`: so may the backward's grad_out (mixed precision's kept gradients).
void check_rope(const char* op, const RopeArgs& args, const char* in_name, const Tensor& in, const char* out_name,
                const Tensor& out, bool sixteen_bit_out = false, bool sixteen_bit_in = false) {
  if (sixteen_bit_in && in.dtype() != DType::f32) {
    MYRIAD_CHECK(in.dtype() == DType::bf16 || in.dtype() == DType::f16,
                 op << ": '" << in_name << "' " << in.describe() << " must be f32, bf16 or f16");
  } else {
    ops::check_dtype(op, in_name, in, DType::f32);
  }
  ops::check_rank(op, in_name, in, 4);
  const std::int64_t D = in.size(3);
  MYRIAD_CHECK(D % 2 == 0,
               op << ": head dim D must be even, '" << in_name << "' has shape " << shape_string(in.shape()));
  if (sixteen_bit_out && out.dtype() != DType::f32) {
    MYRIAD_CHECK(out.dtype() == DType::bf16 || out.dtype() == DType::f16,
                 op << ": '" << out_name << "' " << out.describe() << " must be f32, bf16 or f16");
  } else {
    ops::check_dtype(op, out_name, out, DType::f32);
  }
  ops::check_shape(op, out_name, out, in.shape());
  for (const auto& [name, t] : {ops::NamedTensor{in_name, &in}, ops::NamedTensor{out_name, &out}}) {
    MYRIAD_CHECK(D <= 1 || t->stride(3) == 1,
                 op << ": '" << name << "' must have unit stride in D (its last dim), has shape "
                    << shape_string(t->shape()) << " strides " << shape_string(t->strides()));
  }
  MYRIAD_CHECK(std::isfinite(args.theta) && args.theta > 0.0, op << ": theta must be positive, got " << args.theta);
}

}  // namespace

void rope_forward(const RopeArgs& args, const Tensor& x, Tensor& out) {
  const char* op = "rope_forward";
  check_rope(op, args, "x", x, "out", out, true);
  Device device = ops::check_same_device(op, {{"x", &x}, {"out", &out}});
  if (device.is_cpu()) {
    return ops::compute_into_output(out, [&](Tensor& result) { cpu::rope_forward(args, x, result); });
  }
  ops::backend_of(op, {{"x", &x}, {"out", &out}}).rope_forward(args, x, out);
}

void rope_backward(const RopeArgs& args, const Tensor& grad_out, Tensor& grad_x) {
  const char* op = "rope_backward";
  check_rope(op, args, "grad_out", grad_out, "grad_x", grad_x, true, true);
  Device device = ops::check_same_device(op, {{"grad_out", &grad_out}, {"grad_x", &grad_x}});
  if (device.is_cpu()) {
    // A 16-bit grad_out widened exactly first (a copy: grad_x may be the same view).
    const Tensor wide = grad_out.dtype() == DType::f32 ? grad_out : grad_out.to(DType::f32);
    return ops::compute_into_output(grad_x, [&](Tensor& result) { cpu::rope_backward(args, wide, result); });
  }
  ops::backend_of(op, {{"grad_out", &grad_out}, {"grad_x", &grad_x}}).rope_backward(args, grad_out, grad_x);
}

}  // namespace myriad
