// CudaBackend: the row-wise and elementwise ops (norms, GELU, SwiGLU) over the kernels' launchers.
// Their dispatch points have checked that every tensor is contiguous f32 of the right shape (a
// forward's output f32 or bf16 / f16, a norm's x too), so the launchers get the tensors' pointers
// as they are; optional outputs pass null.
#include <type_traits>

#include "myriad/cuda/cuda_backend.h"
#include "myriad/cuda/device_guard.h"
#include "myriad/cuda/kernels.h"
#include "kernel_pointers.h"

namespace myriad::cuda {

void CudaBackend::layernorm_forward(const LayernormArgs& args, const Tensor& x, const Tensor& weight,
                                    const Tensor& bias, Tensor& out, Tensor& mean, Tensor& rstd) {
  DeviceGuard guard(context_.device());
  const std::int64_t channels = x.size(-1), rows = x.numel() / channels;
  with_input_and_output_pointers("layernorm_forward", x, out, [&](const auto* x_data, auto* out_data) {
    layernorm_forward_f32(x_data, floats(weight), floats(bias), out_data, floats(mean), floats(rstd), rows, channels,
                          args.eps, context_.stream());
  });
}

void CudaBackend::layernorm_backward(const LayernormArgs&, const Tensor& x, const Tensor& weight, const Tensor& mean,
                                     const Tensor& rstd, const Tensor& grad_out, Tensor& grad_x, Tensor& grad_weight,
                                     Tensor& grad_bias) {
  DeviceGuard guard(context_.device());
  const std::int64_t channels = x.size(-1), rows = x.numel() / channels;
  const std::int64_t scratch_floats = layernorm_backward_scratch_floats(rows, channels);
  Tensor scratch = scratch_floats > 0 ? empty({scratch_floats}) : Tensor();
  with_input_pointer("layernorm_backward", x, [&](const auto* x_data) {
    layernorm_backward_f32(floats(grad_out), x_data, floats(weight), floats(mean), floats(rstd), floats(grad_x),
                           floats(grad_weight), floats(grad_bias), floats(scratch), scratch_floats, rows, channels,
                           context_.stream());
  });
}

void CudaBackend::rmsnorm_forward(const RmsnormArgs& args, const Tensor& x, const Tensor& weight, Tensor& out,
                                  Tensor& rstd) {
  DeviceGuard guard(context_.device());
  const std::int64_t channels = x.size(-1), rows = x.numel() / channels;
  with_input_and_output_pointers("rmsnorm_forward", x, out, [&](const auto* x_data, auto* out_data) {
    rmsnorm_forward_f32(x_data, floats(weight), out_data, floats(rstd), rows, channels, args.eps, context_.stream());
  });
}

void CudaBackend::rmsnorm_backward(const RmsnormArgs&, const Tensor& x, const Tensor& weight, const Tensor& rstd,
                                   const Tensor& grad_out, Tensor& grad_x, Tensor& grad_weight) {
  DeviceGuard guard(context_.device());
  const std::int64_t channels = x.size(-1), rows = x.numel() / channels;
  const std::int64_t scratch_floats = layernorm_backward_scratch_floats(rows, channels);
  Tensor scratch = scratch_floats > 0 ? empty({scratch_floats}) : Tensor();
  with_input_pointer("rmsnorm_backward", x, [&](const auto* x_data) {
    rmsnorm_backward_f32(floats(grad_out), x_data, floats(weight), floats(rstd), floats(grad_x), floats(grad_weight),
                         floats(scratch), scratch_floats, rows, channels, context_.stream());
  });
}

void CudaBackend::gelu_forward(const GeluArgs&, const Tensor& x, Tensor& out) {
  DeviceGuard guard(context_.device());
  // f32 x into f32 or 16-bit out; a 16-bit x (a kept pre-activation) into its own format.
  with_input_and_output_pointers("gelu_forward", x, out, [&](const auto* x_data, auto* out_data) {
    using X = std::remove_const_t<std::remove_pointer_t<decltype(x_data)>>;
    using Out = std::remove_pointer_t<decltype(out_data)>;
    if constexpr (std::is_same_v<X, float>) {
      gelu_forward_f32(x_data, out_data, x.numel(), context_.stream());
    } else if constexpr (std::is_same_v<X, Out> && std::is_same_v<X, __nv_bfloat16>) {
      gelu_forward_bf16(x_data, out_data, x.numel(), context_.stream());
    } else if constexpr (std::is_same_v<X, Out>) {
      gelu_forward_f16(x_data, out_data, x.numel(), context_.stream());
    } else {
      MYRIAD_THROW("gelu_forward: a 16-bit x " << x.describe() << " needs out of its format, got " << out.describe());
    }
  });
}

void CudaBackend::gelu_backward(const GeluArgs&, const Tensor& x, const Tensor& grad_out, Tensor& grad_x) {
  DeviceGuard guard(context_.device());
  // x and grad_x of one type: f32, or a kept 16-bit pre-activation and its gradient (the dispatch
  // point checked it); grad_out f32.
  with_input_and_output_pointers("gelu_backward", x, grad_x, [&](const auto* x_data, auto* grad_x_data) {
    using X = std::remove_const_t<std::remove_pointer_t<decltype(x_data)>>;
    using GradX = std::remove_pointer_t<decltype(grad_x_data)>;
    if constexpr (std::is_same_v<X, GradX>) {
      gelu_backward_f32(x_data, floats(grad_out), grad_x_data, x.numel(), context_.stream());
    } else {
      MYRIAD_THROW("gelu_backward: x " << x.describe() << " and grad_x " << grad_x.describe() << " differ in type");
    }
  });
}

// gate and up of one dtype (the dispatch point checked it): f32, or the 16-bit format of the output
// and gradients.
void CudaBackend::swiglu_forward(const SwigluArgs&, const Tensor& gate, const Tensor& up, Tensor& out) {
  DeviceGuard guard(context_.device());
  with_input_and_output_pointers("swiglu_forward", gate, out, [&](const auto* gate_data, auto* out_data) {
    using In = std::remove_cv_t<std::remove_pointer_t<decltype(gate_data)>>;
    using Out = std::remove_pointer_t<decltype(out_data)>;
    if constexpr (std::is_same_v<In, float> || std::is_same_v<In, Out>) {
      swiglu_forward_f32(gate_data, static_cast<const In*>(up.raw_data()), out_data, gate.numel(), context_.stream());
    } else {
      MYRIAD_THROW("swiglu_forward: 16-bit gate " << gate.describe() << " with out " << out.describe());
    }
  });
}

void CudaBackend::swiglu_backward(const SwigluArgs&, const Tensor& gate, const Tensor& up, const Tensor& grad_out,
                                  Tensor& grad_gate, Tensor& grad_up) {
  DeviceGuard guard(context_.device());
  // Both gradients of one dtype (the dispatch point checked it): f32, or a 16-bit format.
  const Tensor& any = grad_gate.defined() ? grad_gate : grad_up;
  if (!any.defined()) return;
  with_input_and_output_pointers("swiglu_backward", gate, any, [&](const auto* gate_data, auto* data) {
    using In = std::remove_cv_t<std::remove_pointer_t<decltype(gate_data)>>;
    using Grad = std::remove_pointer_t<decltype(data)>;
    auto pointer = [](const Tensor& t) { return t.defined() ? static_cast<Grad*>(t.raw_data()) : nullptr; };
    if constexpr (std::is_same_v<In, float> || std::is_same_v<In, Grad>) {
      swiglu_backward_f32(gate_data, static_cast<const In*>(up.raw_data()), floats(grad_out), pointer(grad_gate),
                          pointer(grad_up), gate.numel(), context_.stream());
    } else {
      MYRIAD_THROW("swiglu_backward: 16-bit gate " << gate.describe() << " with gradients " << any.describe());
    }
  });
}

}  // namespace myriad::cuda
