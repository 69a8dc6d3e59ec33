// AdamW dispatch point: validates hyper-parameters, dtypes / shapes / devices, then picks the
// backend.
#include "myriad/ops/adamw.h"

#include <cmath>

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"

namespace myriad {

namespace {

void check_hyper_parameters(const char* op, const AdamWArgs& args) {
  MYRIAD_CHECK(args.step >= 1, op << ": step is " << args.step << ", expected >= 1 (1-based, for bias correction)");
  MYRIAD_CHECK(std::isfinite(args.lr) && args.lr >= 0.0f, op << ": lr is " << args.lr << ", expected finite and >= 0");
  MYRIAD_CHECK(args.beta1 >= 0.0f && args.beta1 < 1.0f, op << ": beta1 is " << args.beta1 << ", expected in [0, 1)");
  MYRIAD_CHECK(args.beta2 >= 0.0f && args.beta2 < 1.0f, op << ": beta2 is " << args.beta2 << ", expected in [0, 1)");
  MYRIAD_CHECK(std::isfinite(args.eps) && args.eps > 0.0f,
               op << ": eps is " << args.eps << ", expected finite and > 0");
  MYRIAD_CHECK(std::isfinite(args.weight_decay) && args.weight_decay >= 0.0f,
               op << ": weight_decay is " << args.weight_decay << ", expected finite and >= 0");
  MYRIAD_CHECK(std::isfinite(args.grad_scale),
               op << ": grad_scale is " << args.grad_scale << ", expected finite (skip the step on overflow instead)");
}

void check_state(const char* op, const char* name, const Tensor& t, const Tensor& param) {
  ops::check_dtype(op, name, t, DType::f32);
  ops::check_shape(op, name, t, param.shape());
  ops::check_contiguous(op, name, t);
}

}  // namespace

void adamw_update(const AdamWArgs& args, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                  const AdamWCopies& copies) {
  const char* op = "adamw_update";
  check_hyper_parameters(op, args);
  ops::check_dtype(op, "param", param, DType::f32);
  ops::check_contiguous(op, "param", param);
  check_state(op, "grad", grad, param);
  check_state(op, "m", m, param);
  check_state(op, "v", v, param);
  if (copies.any()) {
    MYRIAD_CHECK(copies.format == DType::bf16 || copies.format == DType::f16,
                 op << ": the compute copies' format must be bf16 or f16, got " << dtype_name(copies.format));
    if (copies.rounded.defined()) check_state(op, "copies.rounded", copies.rounded, param);
    if (copies.narrow.defined()) {
      ops::check_dtype(op, "copies.narrow", copies.narrow, copies.format);
      ops::check_shape(op, "copies.narrow", copies.narrow, param.shape());
      ops::check_contiguous(op, "copies.narrow", copies.narrow);
    }
  }
  // Undefined copies are skipped by both lookups.
  const auto tensors = {
      ops::NamedTensor{"param", &param}, {"grad", &grad}, {"m", &m}, {"v", &v}, {"copies.rounded", &copies.rounded},
      {"copies.narrow", &copies.narrow}};
  Device device = ops::check_same_device(op, tensors);
  if (device.is_cpu()) return cpu::adamw_update(args, param, grad, m, v, copies);
  ops::backend_of(op, tensors).adamw_update(args, param, grad, m, v, copies);
}

double grad_norm_squared(const Tensor& grad) {
  const char* op = "grad_norm_squared";
  ops::check_dtype(op, "grad", grad, DType::f32);
  Device device = grad.device();
  if (device.is_cpu()) return cpu::grad_norm_squared(grad);
  return ops::backend_of(op, {{"grad", &grad}}).grad_norm_squared(grad);
}

std::vector<double> grad_norms_squared(const std::vector<Tensor>& grads) {
  const char* op = "grad_norms_squared";
  if (grads.empty()) return {};
  Device device = grads[0].device();
  for (const Tensor& grad : grads) {
    ops::check_dtype(op, "grad", grad, DType::f32);
    device = ops::check_same_device(op, {{"first grad", &grads[0]}, {"grad", &grad}});
  }
  if (device.is_cpu()) {
    std::vector<double> sums;
    for (const Tensor& grad : grads) sums.push_back(cpu::grad_norm_squared(grad));
    return sums;
  }
  return ops::backend_of(op, {{"grad", &grads[0]}}).grad_norms_squared(grads);
}

}  // namespace myriad
