// FP8 ops' dispatch points: shape, dtype and device checks, then the backend.
#include "myriad/ops/fp8.h"

#include <cmath>

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"

namespace myriad {

namespace {

bool is_fp8(DType dtype) { return dtype == DType::f8e4m3 || dtype == DType::f8e5m2; }

void check_fp8(const char* op, const char* name, const Tensor& t) {
  ops::check_defined(op, name, t);
  MYRIAD_CHECK(is_fp8(t.dtype()), op << ": " << name << " must be f8e4m3 or f8e5m2, got " << t.describe());
  ops::check_contiguous(op, name, t);
}

}  // namespace

void fp8_quantize(const Tensor& x, const Tensor& scale, Tensor& out, Tensor& out_t, Tensor& amax) {
  const char* op = "fp8_quantize";
  const std::int64_t channels = ops::check_f32_rows(op, "x", x);
  const std::int64_t rows = x.numel() / channels;
  check_fp8(op, "out", out);
  ops::check_shape(op, "out", out, x.shape());
  if (out_t.defined()) {
    check_fp8(op, "out_t", out_t);
    ops::check_shape(op, "out_t", out_t, {channels, rows});
    MYRIAD_CHECK(out_t.dtype() == out.dtype(), op << ": out_t is " << dtype_name(out_t.dtype()) << ", out "
                                                  << dtype_name(out.dtype()) << " (one format)");
  }
  if (amax.defined()) ops::check_f32_contiguous(op, "amax", amax, {1});
  ops::check_f32_contiguous(op, "scale", scale, {1});
  const Device device =
      ops::check_same_device(op, {{"x", &x}, {"scale", &scale}, {"out", &out}, {"out_t", &out_t}, {"amax", &amax}});
  if (device.is_cpu()) return cpu::fp8_quantize(x, scale, out, out_t, amax);
  ops::backend_of(op, {{"x", &x}, {"scale", &scale}, {"out", &out}, {"out_t", &out_t}, {"amax", &amax}})
      .fp8_quantize(x, scale, out, out_t, amax);
}

void fp8_gemm(const Fp8GemmArgs& args, const Tensor& a, const Tensor& a_dequant, const Tensor& b,
              const Tensor& b_dequant, Tensor& out) {
  const char* op = "fp8_gemm";
  check_fp8(op, "a", a);
  check_fp8(op, "b", b);
  ops::check_rank(op, "a", a, 2);
  ops::check_rank(op, "b", b, 2);
  MYRIAD_CHECK(!(a.dtype() == DType::f8e5m2 && b.dtype() == DType::f8e5m2),
               op << ": a and b are both f8e5m2; one operand must be f8e4m3 (FP8 tensor cores take no E5M2 x E5M2)");
  MYRIAD_CHECK(a.size(1) == b.size(1), op << ": a " << a.describe() << " and b " << b.describe()
                                          << " differ in K (both are reduced along their last dim)");
  ops::check_f32_contiguous(op, "out", out, {a.size(0), b.size(0)});
  ops::check_f32_contiguous(op, "a_dequant", a_dequant, {1});
  ops::check_f32_contiguous(op, "b_dequant", b_dequant, {1});
  const Device device = ops::check_same_device(
      op, {{"a", &a}, {"a_dequant", &a_dequant}, {"b", &b}, {"b_dequant", &b_dequant}, {"out", &out}});
  if (device.is_cpu()) return cpu::fp8_gemm(args, a, a_dequant, b, b_dequant, out);
  ops::backend_of(op, {{"a", &a}, {"a_dequant", &a_dequant}, {"b", &b}, {"b_dequant", &b_dequant}, {"out", &out}})
      .fp8_gemm(args, a, a_dequant, b, b_dequant, out);
}

}  // namespace myriad
