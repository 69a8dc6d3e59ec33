// Weight-only INT8 dispatch point: validates shapes / dtypes / devices, then picks the backend
// (quantisation and dequantisation run on the host: they prepare files and models).
#include "myriad/ops/int8_linear.h"

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"

namespace myriad {

namespace {

void check_quantized(const char* op, const Int8Args& args, const Tensor& q, const Tensor& scales) {
  MYRIAD_CHECK(args.group_size >= 0, op << ": group_size " << args.group_size << " must be >= 0 (0 = per row)");
  ops::check_dtype(op, "q", q, DType::i8);
  ops::check_rank(op, "q", q, 2);
  ops::check_dtype(op, "scales", scales, DType::f32);
  ops::check_shape(op, "scales", scales, {q.size(0), int8_groups(q.size(1), args.group_size)});
  ops::check_contiguous(op, "q", q);
  ops::check_contiguous(op, "scales", scales);
}

void check_host(const char* op, std::initializer_list<ops::NamedTensor> tensors) {
  for (const auto& [name, t] : tensors) {
    MYRIAD_CHECK(t->device().is_cpu(), op << ": '" << name << "' " << t->describe()
                                          << " must be on the host (quantisation prepares weights there)");
  }
}

}  // namespace

std::int64_t int8_groups(std::int64_t K, std::int64_t group_size) {
  return group_size == 0 ? 1 : (K + group_size - 1) / group_size;
}

void quantize_int8(const Int8Args& args, const Tensor& weight, Tensor& q, Tensor& scales) {
  const char* op = "quantize_int8";
  ops::check_dtype(op, "weight", weight, DType::f32);
  ops::check_rank(op, "weight", weight, 2);
  ops::check_contiguous(op, "weight", weight);
  ops::check_shape(op, "q", q, weight.shape());
  check_quantized(op, args, q, scales);
  check_host(op, {{"weight", &weight}, {"q", &q}, {"scales", &scales}});
  cpu::quantize_int8(args, weight, q, scales);
}

void dequantize_int8(const Int8Args& args, const Tensor& q, const Tensor& scales, Tensor& weight) {
  const char* op = "dequantize_int8";
  check_quantized(op, args, q, scales);
  ops::check_dtype(op, "weight", weight, DType::f32);
  ops::check_shape(op, "weight", weight, q.shape());
  ops::check_contiguous(op, "weight", weight);
  check_host(op, {{"q", &q}, {"scales", &scales}, {"weight", &weight}});
  cpu::dequantize_int8(args, q, scales, weight);
}

void int8_linear_forward(const Int8Args& args, const Tensor& x, const Tensor& q, const Tensor& scales,
                         const Tensor& bias, Tensor& y) {
  const char* op = "int8_linear_forward";
  check_quantized(op, args, q, scales);
  ops::check_dtype(op, "x", x, DType::f32);
  ops::check_dtype(op, "y", y, DType::f32);
  MYRIAD_CHECK(x.dim() >= 1 && x.size(-1) == q.size(1),
               op << ": x " << x.describe() << " must end in the weight's in-features " << q.size(1));
  Shape y_shape = x.shape();
  y_shape.back() = q.size(0);
  ops::check_shape(op, "y", y, y_shape);
  ops::check_contiguous(op, "x", x);
  ops::check_contiguous(op, "y", y);
  if (bias.defined()) {
    ops::check_dtype(op, "bias", bias, DType::f32);
    ops::check_shape(op, "bias", bias, {q.size(0)});
    ops::check_contiguous(op, "bias", bias);
  }
  const std::initializer_list<ops::NamedTensor> tensors = {
      {"x", &x}, {"q", &q}, {"scales", &scales}, {"bias", &bias}, {"y", &y}};
  Device device = ops::check_same_device(op, tensors);
  if (device.is_cpu()) return cpu::int8_linear_forward(args, x, q, scales, bias, y);
  ops::backend_of(op, tensors).int8_linear_forward(args, x, q, scales, bias, y);
}

void int8_embedding_forward(const Int8Args& args, const Tensor& ids, const Tensor& q, const Tensor& scales,
                            Tensor& out) {
  const char* op = "int8_embedding_forward";
  check_quantized(op, args, q, scales);
  ops::check_dtype(op, "ids", ids, DType::i32);
  ops::check_dtype(op, "out", out, DType::f32);
  Shape out_shape = ids.shape();
  out_shape.push_back(q.size(1));
  ops::check_shape(op, "out", out, out_shape);
  ops::check_contiguous(op, "ids", ids);
  ops::check_contiguous(op, "out", out);
  const std::initializer_list<ops::NamedTensor> tensors = {
      {"ids", &ids}, {"q", &q}, {"scales", &scales}, {"out", &out}};
  Device device = ops::check_same_device(op, tensors);
  if (device.is_cpu()) return cpu::int8_embedding_forward(args, ids, q, scales, out);
  ops::backend_of(op, tensors).int8_embedding_forward(args, ids, q, scales, out);
}

}  // namespace myriad
