// Matmul dispatch point: validates shapes / dtypes / devices, then picks the backend.
#include "myriad/ops/matmul.h"

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"
#include "f32_operand.h"
#include "f32_output.h"

namespace myriad {

namespace {

struct MatmulDims {
  std::int64_t m, k, n;
  Shape batch;  // leading dims of a (and of out)
};

// a and b: both f32, or both bf16 or both f16 (16-bit operands; products summed in f32).
MatmulDims check_matmul(const char* op, const MatmulArgs& args, const Tensor& a, const Tensor& b) {
  ops::check_defined(op, "a", a);
  ops::check_defined(op, "b", b);
  const DType t = a.dtype();
  MYRIAD_CHECK((t == DType::f32 || t == DType::bf16 || t == DType::f16) && b.dtype() == t,
               op << ": a " << a.describe() << " and b " << b.describe()
                  << " must both be f32, both bf16 or both f16 (16-bit operands, f32 sums and outputs)");
  MYRIAD_CHECK(a.dim() >= 2 && b.dim() >= 2,
               op << ": a " << a.describe() << " and b " << b.describe() << " must have at least 2 dimensions");
  MatmulDims dims;
  dims.m = args.transpose_a ? a.size(-1) : a.size(-2);
  std::int64_t k_a = args.transpose_a ? a.size(-2) : a.size(-1);
  std::int64_t k_b = args.transpose_b ? b.size(-1) : b.size(-2);
  dims.n = args.transpose_b ? b.size(-2) : b.size(-1);
  MYRIAD_CHECK(k_a == k_b, op << ": inner dimensions differ: a " << shape_string(a.shape())
                              << (args.transpose_a ? " (transposed)" : "") << " gives K=" << k_a << ", b "
                              << shape_string(b.shape()) << (args.transpose_b ? " (transposed)" : "")
                              << " gives K=" << k_b);
  dims.k = k_a;
  dims.batch.assign(a.shape().begin(), a.shape().end() - 2);
  if (b.dim() > 2) {
    Shape b_batch(b.shape().begin(), b.shape().end() - 2);
    MYRIAD_CHECK(b_batch == dims.batch, op << ": batch dims of a " << shape_string(a.shape()) << " and b "
                                           << shape_string(b.shape()) << " differ (b may also be 2-D)");
  }
  return dims;
}

// An output of the product: f32, or — written, not accumulated — the 16-bit operands' format.
void check_output_dtype(const char* op, const char* name, const Tensor& t, DType operands, bool accumulate) {
  if (t.dtype() == DType::f32) return;
  const bool sixteen_bit_operands = operands != DType::f32;
  MYRIAD_CHECK(t.dtype() == operands && sixteen_bit_operands && !accumulate,
               op << ": '" << name << "' " << t.describe() << " must be f32"
                  << (sixteen_bit_operands && !accumulate ? " or " + std::string(dtype_name(operands)) : "")
                  << (sixteen_bit_operands && accumulate ? " (it accumulates)" : ""));
}

Shape out_shape(const MatmulDims& dims) {
  Shape shape = dims.batch;
  shape.push_back(dims.m);
  shape.push_back(dims.n);
  return shape;
}

}  // namespace

void matmul_forward(const MatmulArgs& args, const Tensor& a, const Tensor& b, Tensor& out) {
  const char* op = "matmul_forward";
  MatmulDims dims = check_matmul(op, args, a, b);
  ops::check_defined(op, "out", out);
  check_output_dtype(op, "out", out, a.dtype(), args.accumulate);
  ops::check_shape(op, "out", out, out_shape(dims));
  const std::initializer_list<ops::NamedTensor> tensors = {{"a", &a}, {"b", &b}, {"out", &out}};
  Device device = ops::check_same_device(op, tensors);
  if (device.is_cpu()) {
    return ops::compute_into_output(out, [&](Tensor& result) {
      cpu::matmul_forward(args, ops::as_f32_operand(a), ops::as_f32_operand(b), result);
    });
  }
  ops::backend_of(op, tensors).matmul_forward(args, a, b, out);
}

void matmul_backward(const MatmulArgs& args, const Tensor& a, const Tensor& b, const Tensor& grad_out, Tensor& grad_a,
                     Tensor& grad_b) {
  const char* op = "matmul_backward";
  MatmulDims dims = check_matmul(op, args, a, b);
  ops::check_dtype(op, "grad_out", grad_out, a.dtype());  // the operands' type: every product is of one type
  ops::check_shape(op, "grad_out", grad_out, out_shape(dims));
  if (grad_a.defined()) {
    check_output_dtype(op, "grad_a", grad_a, a.dtype(), args.accumulate_grad_a);
    ops::check_shape(op, "grad_a", grad_a, a.shape());
  }
  if (grad_b.defined()) {
    ops::check_dtype(op, "grad_b", grad_b, DType::f32);
    ops::check_shape(op, "grad_b", grad_b, b.shape());
  }
  const std::initializer_list<ops::NamedTensor> tensors = {
      {"a", &a}, {"b", &b}, {"grad_out", &grad_out}, {"grad_a", &grad_a}, {"grad_b", &grad_b}};
  Device device = ops::check_same_device(op, tensors);
  if (device.is_cpu()) {
    const Tensor wide_a = ops::as_f32_operand(a), wide_b = ops::as_f32_operand(b);
    const Tensor wide_g = ops::as_f32_operand(grad_out);
    if (!grad_a.defined() || grad_a.dtype() == DType::f32) {
      return cpu::matmul_backward(args, wide_a, wide_b, wide_g, grad_a, grad_b);
    }
    // A 16-bit grad_a: its f32 sums rounded once; grad_b (f32) from the same operands.
    Tensor no_grad;
    ops::compute_into_output(
        grad_a, [&](Tensor& result) { cpu::matmul_backward(args, wide_a, wide_b, wide_g, result, no_grad); });
    if (grad_b.defined()) cpu::matmul_backward(args, wide_a, wide_b, wide_g, no_grad, grad_b);
    return;
  }
  ops::backend_of(op, tensors).matmul_backward(args, a, b, grad_out, grad_a, grad_b);
}

}  // namespace myriad
