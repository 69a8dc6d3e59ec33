// 1-bit Adam's dispatch points (ops/onebit_adam_update.h): argument checks, then the backend.
#include "myriad/ops/onebit_adam_update.h"

#include <cmath>

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"

namespace myriad {

void onebit_adam_momentum(const OneBitAdamMomentumArgs& args, Tensor& m, const Tensor& grad) {
  const char* op = "onebit_adam_momentum";
  ops::check_defined(op, "m", m);
  ops::check_f32_contiguous(op, "m", m, m.shape());
  ops::check_defined(op, "grad", grad);
  ops::check_f32_contiguous(op, "grad", grad, grad.shape());
  MYRIAD_CHECK(grad.numel() == m.numel(), op << ": m has " << m.numel() << " elements, grad " << grad.numel());
  const std::initializer_list<ops::NamedTensor> tensors = {{"m", &m}, {"grad", &grad}};
  if (ops::check_same_device(op, tensors).is_cpu()) return cpu::onebit_adam_momentum(args, m, grad);
  ops::backend_of(op, tensors).onebit_adam_momentum(args, m, grad);
}

void onebit_adam_update(const OneBitAdamUpdateArgs& args, Tensor& param, Tensor& m, const Tensor& v) {
  const char* op = "onebit_adam_update";
  MYRIAD_CHECK(args.bias1 > 0.0f && args.bias2 > 0.0f && args.eps > 0.0f && std::isfinite(args.lr),
               op << ": need bias1, bias2, eps > 0 and a finite lr; got bias1 " << args.bias1 << ", bias2 "
                  << args.bias2 << ", eps " << args.eps << ", lr " << args.lr);
  ops::check_defined(op, "param", param);
  ops::check_f32_contiguous(op, "param", param, param.shape());
  ops::check_f32_contiguous(op, "m", m, param.shape());
  ops::check_f32_contiguous(op, "v", v, param.shape());
  const std::initializer_list<ops::NamedTensor> tensors = {{"param", &param}, {"m", &m}, {"v", &v}};
  if (ops::check_same_device(op, tensors).is_cpu()) return cpu::onebit_adam_update(args, param, m, v);
  ops::backend_of(op, tensors).onebit_adam_update(args, param, m, v);
}

}  // namespace myriad
