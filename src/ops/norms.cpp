// LayerNorm / RMSNorm dispatch points: validate shapes / dtypes / devices, then pick the backend.
#include "myriad/ops/norms.h"

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"
#include "f32_operand.h"
#include "f32_output.h"

namespace myriad {

namespace {

// A per-channel parameter (or its gradient) of shape (C).
void check_channel(const char* op, const char* name, const Tensor& t, std::int64_t channels) {
  ops::check_dtype(op, name, t, DType::f32);
  ops::check_shape(op, name, t, {channels});
  ops::check_contiguous(op, name, t);
}

// A per-row statistic: shape (N) or the leading dims of x.
void check_row_stat(const char* op, const char* name, const Tensor& t, const Tensor& x) {
  ops::check_dtype(op, name, t, DType::f32);
  Shape leading(x.shape().begin(), x.shape().end() - 1);
  std::int64_t rows = shape_numel(leading);
  MYRIAD_CHECK(t.shape() == leading || t.shape() == Shape{rows},
               op << ": '" << name << "' has shape " << shape_string(t.shape()) << ", expected "
                  << shape_string(leading) << " or [" << rows << "] (one value per row of x " << shape_string(x.shape())
                  << ")");
  ops::check_contiguous(op, name, t);
}

}  // namespace

void layernorm_forward(const LayernormArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias,
                       Tensor& out, Tensor& mean, Tensor& rstd) {
  const char* op = "layernorm_forward";
  std::int64_t channels = ops::check_float_rows(op, "x", x);
  check_channel(op, "weight", weight, channels);
  if (bias.defined()) check_channel(op, "bias", bias, channels);
  ops::check_f32_or_16bit_output(op, "out", out, x.shape());
  ops::check_one_16bit_format(op, "x", x, "out", out);
  if (mean.defined()) check_row_stat(op, "mean", mean, x);
  if (rstd.defined()) check_row_stat(op, "rstd", rstd, x);
  MYRIAD_CHECK(args.eps >= 0.0f, op << ": eps must be >= 0, got " << args.eps);
  const std::initializer_list<ops::NamedTensor> tensors = {{"x", &x},     {"weight", &weight}, {"bias", &bias},
                                                           {"out", &out}, {"mean", &mean},     {"rstd", &rstd}};
  Device device = ops::check_same_device(op, tensors);
  if (device.is_cpu()) {
    return ops::compute_into_output(out, [&](Tensor& result) {
      cpu::layernorm_forward(args, ops::as_f32_operand(x), weight, bias, result, mean, rstd);
    });
  }
  ops::backend_of(op, tensors).layernorm_forward(args, x, weight, bias, out, mean, rstd);
}

void layernorm_backward(const LayernormArgs& args, const Tensor& x, const Tensor& weight, const Tensor& mean,
                        const Tensor& rstd, const Tensor& grad_out, Tensor& grad_x, Tensor& grad_weight,
                        Tensor& grad_bias) {
  const char* op = "layernorm_backward";
  std::int64_t channels = ops::check_float_rows(op, "x", x);
  check_channel(op, "weight", weight, channels);
  check_row_stat(op, "mean", mean, x);
  check_row_stat(op, "rstd", rstd, x);
  ops::check_f32_contiguous(op, "grad_out", grad_out, x.shape());
  if (grad_x.defined()) ops::check_f32_contiguous(op, "grad_x", grad_x, x.shape());
  if (grad_weight.defined()) check_channel(op, "grad_weight", grad_weight, channels);
  if (grad_bias.defined()) check_channel(op, "grad_bias", grad_bias, channels);
  const std::initializer_list<ops::NamedTensor> tensors = {{"x", &x},
                                                           {"weight", &weight},
                                                           {"mean", &mean},
                                                           {"rstd", &rstd},
                                                           {"grad_out", &grad_out},
                                                           {"grad_x", &grad_x},
                                                           {"grad_weight", &grad_weight},
                                                           {"grad_bias", &grad_bias}};
  Device device = ops::check_same_device(op, tensors);
  if (device.is_cpu()) {
    return cpu::layernorm_backward(args, ops::as_f32_operand(x), weight, mean, rstd, grad_out, grad_x, grad_weight,
                                   grad_bias);
  }
  ops::backend_of(op, tensors)
      .layernorm_backward(args, x, weight, mean, rstd, grad_out, grad_x, grad_weight, grad_bias);
}

void rmsnorm_forward(const RmsnormArgs& args, const Tensor& x, const Tensor& weight, Tensor& out, Tensor& rstd) {
  const char* op = "rmsnorm_forward";
  std::int64_t channels = ops::check_float_rows(op, "x", x);
  check_channel(op, "weight", weight, channels);
  ops::check_f32_or_16bit_output(op, "out", out, x.shape());
  ops::check_one_16bit_format(op, "x", x, "out", out);
  if (rstd.defined()) check_row_stat(op, "rstd", rstd, x);
  MYRIAD_CHECK(args.eps >= 0.0f, op << ": eps must be >= 0, got " << args.eps);
  const std::initializer_list<ops::NamedTensor> tensors = {
      {"x", &x}, {"weight", &weight}, {"out", &out}, {"rstd", &rstd}};
  Device device = ops::check_same_device(op, tensors);
  if (device.is_cpu()) {
    return ops::compute_into_output(
        out, [&](Tensor& result) { cpu::rmsnorm_forward(args, ops::as_f32_operand(x), weight, result, rstd); });
  }
  ops::backend_of(op, tensors).rmsnorm_forward(args, x, weight, out, rstd);
}

void rmsnorm_backward(const RmsnormArgs& args, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                      const Tensor& grad_out, Tensor& grad_x, Tensor& grad_weight) {
  const char* op = "rmsnorm_backward";
  std::int64_t channels = ops::check_float_rows(op, "x", x);
  check_channel(op, "weight", weight, channels);
  check_row_stat(op, "rstd", rstd, x);
  ops::check_f32_contiguous(op, "grad_out", grad_out, x.shape());
  if (grad_x.defined()) ops::check_f32_contiguous(op, "grad_x", grad_x, x.shape());
  if (grad_weight.defined()) check_channel(op, "grad_weight", grad_weight, channels);
  const std::initializer_list<ops::NamedTensor> tensors = {{"x", &x},           {"weight", &weight},
                                                           {"rstd", &rstd},     {"grad_out", &grad_out},
                                                           {"grad_x", &grad_x}, {"grad_weight", &grad_weight}};
  Device device = ops::check_same_device(op, tensors);
  if (device.is_cpu())
    return cpu::rmsnorm_backward(args, ops::as_f32_operand(x), weight, rstd, grad_out, grad_x, grad_weight);
  ops::backend_of(op, tensors).rmsnorm_backward(args, x, weight, rstd, grad_out, grad_x, grad_weight);
}

}  // namespace myriad
