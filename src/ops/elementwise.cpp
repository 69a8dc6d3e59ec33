// Elementwise dispatch points: validate shapes / dtypes / layouts / devices, then pick the backend.
#include "myriad/ops/elementwise.h"

#include "myriad/core/precision.h"

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"
#include "f32_operand.h"
#include "f32_output.h"

namespace myriad {

namespace {

void check_operand(const char* op, const char* name, const Tensor& t, const Tensor* like = nullptr) {
  ops::check_dtype(op, name, t, DType::f32);
  if (like != nullptr) ops::check_shape(op, name, t, like->shape());
  ops::check_contiguous(op, name, t);
}

bool is_float_type(DType t) { return t == DType::f32 || t == DType::bf16 || t == DType::f16; }

}  // namespace

void add_forward(const AddArgs& args, const Tensor& a, const Tensor& b, Tensor& out) {
  const char* op = "add_forward";
  check_operand(op, "a", a);
  if (b.defined()) {
    ops::check_f32_or_16bit_output(op, "b", b, a.shape());
    MYRIAD_CHECK(b.dtype() == DType::f32 || out.dtype() == DType::f32,
                 op << ": b " << b.describe() << " and out " << out.describe()
                    << " are both 16-bit (one side of the sum in f32: a residual add reads or writes 16 bits)");
  }
  ops::check_f32_or_16bit_output(op, "out", out, a.shape());
  const std::initializer_list<ops::NamedTensor> tensors = {{"a", &a}, {"b", &b}, {"out", &out}};
  Device device = ops::check_same_device(op, tensors);
  if (device.is_cpu()) {
    return ops::compute_into_output(out,
                                    [&](Tensor& result) { cpu::add_forward(args, a, ops::as_f32_operand(b), result); });
  }
  ops::backend_of(op, tensors).add_forward(args, a, b, out);
}

void add_backward(const AddArgs& args, const Tensor& grad_out, Tensor& grad_a, Tensor& grad_b) {
  const char* op = "add_backward";
  check_operand(op, "grad_out", grad_out);
  if (grad_a.defined()) check_operand(op, "grad_a", grad_a, &grad_out);
  if (grad_b.defined()) check_operand(op, "grad_b", grad_b, &grad_out);
  MYRIAD_CHECK(!(grad_a.defined() && grad_b.defined() && grad_a.raw_data() == grad_b.raw_data()),
               op << ": grad_a and grad_b are the same buffer");
  const std::initializer_list<ops::NamedTensor> tensors = {
      {"grad_out", &grad_out}, {"grad_a", &grad_a}, {"grad_b", &grad_b}};
  Device device = ops::check_same_device(op, tensors);
  if (device.is_cpu()) return cpu::add_backward(args, grad_out, grad_a, grad_b);
  ops::backend_of(op, tensors).add_backward(args, grad_out, grad_a, grad_b);
}

void copy(const Tensor& src, Tensor& dst) {
  const char* op = "copy";
  ops::check_defined(op, "src", src);
  ops::check_defined(op, "dst", dst);
  ops::check_shape(op, "dst", dst, src.shape());
  // The CPU writes any view; a device backend writes the views it knows (else it throws naming them).
  MYRIAD_CHECK(src.dtype() == dst.dtype() || (is_float_type(src.dtype()) && is_float_type(dst.dtype())),
               op << ": converts between f32, bf16 and f16 only, got " << dtype_name(src.dtype()) << " -> "
                  << dtype_name(dst.dtype()));
  const std::initializer_list<ops::NamedTensor> tensors = {{"src", &src}, {"dst", &dst}};
  Device device = ops::check_same_device(op, tensors);
  if (device.is_cpu()) return cpu::copy(src, dst);
  ops::backend_of(op, tensors).copy(src, dst);
}

void fill(Tensor& t, float value) {
  const char* op = "fill";
  check_operand(op, "t", t);
  if (t.device().is_cpu()) return cpu::fill(t, value);
  ops::backend_of(op, {{"t", &t}}).fill(t, value);
}

void zero(Tensor& t) {
  const char* op = "zero";
  ops::check_contiguous(op, "t", t);
  if (t.device().is_cpu()) return cpu::zero(t);
  ops::backend_of(op, {{"t", &t}}).zero(t);
}

void round_to_format(Tensor& t, DType format) {
  const char* op = "round_to_format";
  check_operand(op, "t", t);
  MYRIAD_CHECK(format == DType::f32 || format == DType::bf16 || format == DType::f16,
               op << ": format must be f32, bf16 or f16, got " << dtype_name(format));
  if (format == DType::f32) return;
  if (t.device().is_cpu()) return round_to_precision(t, format);
  // On a backend: through a tensor of the format (its conversion rounds to nearest even).
  ops::Backend& backend = ops::backend_of(op, {{"t", &t}});
  Tensor narrow = backend.empty(t.shape(), format);
  backend.copy(t, narrow);
  backend.copy(narrow, t);
}

}  // namespace myriad
