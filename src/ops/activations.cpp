// GELU / SwiGLU dispatch points: validate shapes / dtypes / devices, then pick the backend.
#include "myriad/ops/activations.h"

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"
#include "f32_operand.h"
#include "f32_output.h"

namespace myriad {

namespace {

// A contiguous f32 tensor; with `like`, also of like's shape.
void check_elementwise(const char* op, const char* name, const Tensor& t, const Tensor* like = nullptr) {
  ops::check_dtype(op, name, t, DType::f32);
  if (like != nullptr) ops::check_shape(op, name, t, like->shape());
  ops::check_contiguous(op, name, t);
}

// SwiGLU's gate and up: contiguous, of one shape and dtype — f32, or a 16-bit format (mixed
// precision's kept pre-activations) that the output and gradients share.
void check_gate_and_up(const char* op, const Tensor& gate, const Tensor& up, const char* out_name, const Tensor& out) {
  MYRIAD_CHECK(gate.dtype() == DType::f32 || gate.dtype() == DType::bf16 || gate.dtype() == DType::f16,
               op << ": 'gate' " << gate.describe() << " must be f32, bf16 or f16");
  ops::check_contiguous(op, "gate", gate);
  ops::check_dtype(op, "up", up, gate.dtype());
  ops::check_shape(op, "up", up, gate.shape());
  ops::check_contiguous(op, "up", up);
  MYRIAD_CHECK(gate.dtype() == DType::f32 || !out.defined() || out.dtype() == gate.dtype(),
               op << ": 16-bit 'gate' " << gate.describe() << " needs '" << out_name << "' of its format, got "
                  << out.describe());
}

}  // namespace

void gelu_forward(const GeluArgs& args, const Tensor& x, Tensor& out) {
  const char* op = "gelu_forward";
  // x: f32, or a 16-bit format (a kept pre-activation, read widened) that out then shares.
  MYRIAD_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f16,
               op << ": 'x' " << x.describe() << " must be f32, bf16 or f16");
  ops::check_contiguous(op, "x", x);
  ops::check_f32_or_16bit_output(op, "out", out, x.shape());
  MYRIAD_CHECK(x.dtype() == DType::f32 || out.dtype() == x.dtype(),
               op << ": 16-bit 'x' " << x.describe() << " needs 'out' of its format, got " << out.describe());
  Device device = ops::check_same_device(op, {{"x", &x}, {"out", &out}});
  if (device.is_cpu()) {
    return ops::compute_into_output(out,
                                    [&](Tensor& result) { cpu::gelu_forward(args, ops::as_f32_operand(x), result); });
  }
  ops::backend_of(op, {{"x", &x}, {"out", &out}}).gelu_forward(args, x, out);
}

void gelu_backward(const GeluArgs& args, const Tensor& x, const Tensor& grad_out, Tensor& grad_x) {
  const char* op = "gelu_backward";
  // x: f32, or a 16-bit format (a kept pre-activation, read widened) that grad_x then shares.
  MYRIAD_CHECK(x.dtype() == DType::f32 || x.dtype() == DType::bf16 || x.dtype() == DType::f16,
               op << ": 'x' " << x.describe() << " must be f32, bf16 or f16");
  ops::check_contiguous(op, "x", x);
  check_elementwise(op, "grad_out", grad_out, &x);
  ops::check_dtype(op, "grad_x", grad_x, x.dtype());
  ops::check_shape(op, "grad_x", grad_x, x.shape());
  ops::check_contiguous(op, "grad_x", grad_x);
  Device device = ops::check_same_device(op, {{"x", &x}, {"grad_out", &grad_out}, {"grad_x", &grad_x}});
  if (device.is_cpu()) {
    return ops::compute_into_output(
        grad_x, [&](Tensor& result) { cpu::gelu_backward(args, ops::as_f32_operand(x), grad_out, result); });
  }
  ops::backend_of(op, {{"x", &x}, {"grad_out", &grad_out}, {"grad_x", &grad_x}})
      .gelu_backward(args, x, grad_out, grad_x);
}

void swiglu_forward(const SwigluArgs& args, const Tensor& gate, const Tensor& up, Tensor& out) {
  const char* op = "swiglu_forward";
  ops::check_f32_or_16bit_output(op, "out", out, gate.shape());
  check_gate_and_up(op, gate, up, "out", out);
  Device device = ops::check_same_device(op, {{"gate", &gate}, {"up", &up}, {"out", &out}});
  if (device.is_cpu()) {
    return ops::compute_into_output(out, [&](Tensor& result) {
      cpu::swiglu_forward(args, ops::as_f32_operand(gate), ops::as_f32_operand(up), result);
    });
  }
  ops::backend_of(op, {{"gate", &gate}, {"up", &up}, {"out", &out}}).swiglu_forward(args, gate, up, out);
}

void swiglu_backward(const SwigluArgs& args, const Tensor& gate, const Tensor& up, const Tensor& grad_out,
                     Tensor& grad_gate, Tensor& grad_up) {
  const char* op = "swiglu_backward";
  check_elementwise(op, "grad_out", grad_out);
  check_gate_and_up(op, gate, up, "grad_gate", grad_gate.defined() ? grad_gate : grad_up);
  ops::check_shape(op, "grad_out", grad_out, gate.shape());
  if (grad_gate.defined()) ops::check_f32_or_16bit_output(op, "grad_gate", grad_gate, gate.shape());
  if (grad_up.defined()) ops::check_f32_or_16bit_output(op, "grad_up", grad_up, gate.shape());
  MYRIAD_CHECK(
      !grad_gate.defined() || !grad_up.defined() || grad_gate.dtype() == grad_up.dtype(),
      op << ": grad_gate " << grad_gate.describe() << " and grad_up " << grad_up.describe() << " must be of one dtype");
  const std::initializer_list<ops::NamedTensor> tensors = {
      {"gate", &gate}, {"up", &up}, {"grad_out", &grad_out}, {"grad_gate", &grad_gate}, {"grad_up", &grad_up}};
  Device device = ops::check_same_device(op, tensors);
  if (device.is_cpu()) {
    // f32 results (scratch for a 16-bit gradient), then each rounded once into its output.
    auto wide = [](const Tensor& t) { return t.defined() && t.dtype() != DType::f32 ? Tensor::empty(t.shape()) : t; };
    Tensor gate_result = wide(grad_gate), up_result = wide(grad_up);
    cpu::swiglu_backward(args, ops::as_f32_operand(gate), ops::as_f32_operand(up), grad_out, gate_result, up_result);
    if (gate_result.defined() && gate_result.raw_data() != grad_gate.raw_data()) grad_gate.copy_from(gate_result);
    if (up_result.defined() && up_result.raw_data() != grad_up.raw_data()) grad_up.copy_from(up_result);
    return;
  }
  ops::backend_of(op, tensors).swiglu_backward(args, gate, up, grad_out, grad_gate, grad_up);
}

}  // namespace myriad
