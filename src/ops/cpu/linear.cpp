// CPU linear: matmul (x W^T), then bias_add and GELU in place — the reference of the fused ops
// (and of the GELU MLP's fused pair: the unfused sequence, bit for bit).
#include "myriad/ops/activations.h"
#include "myriad/ops/bias_add.h"
#include "myriad/ops/linear.h"
#include "myriad/ops/matmul.h"

namespace myriad::cpu {

void linear_forward(const LinearArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y) {
  cpu::matmul_forward(MatmulArgs{.transpose_b = true}, x, weight, y);
  if (bias.defined()) cpu::bias_add_forward(BiasAddArgs{}, y, bias, y);
  if (args.gelu) cpu::gelu_forward(GeluArgs{}, y, y);
}

void linear_gelu_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& pre_activation, Tensor& y) {
  cpu::linear_forward(LinearArgs{}, x, weight, bias, pre_activation);
  cpu::gelu_forward(GeluArgs{}, pre_activation, y);
}

void linear_dgelu_backward(const Tensor& grad_y, const Tensor& weight, const Tensor& pre_activation, Tensor& grad_pre,
                           Tensor& grad_bias) {
  // grad_y W: the same sgemm as matmul_backward's input gradient of a W^T. A 16-bit pre-activation
  // is read widened and grad_pre written in its format (the f32 product rounded once); the bias
  // gradient is the column sums of those rounded values.
  if (pre_activation.dtype() != DType::f32) {
    Tensor wide = Tensor::empty(grad_pre.shape());
    cpu::matmul_forward(MatmulArgs{}, grad_y, weight, wide);
    myriad::gelu_backward(GeluArgs{}, pre_activation, wide, grad_pre);  // reads widened, rounds once
    if (grad_bias.defined()) {
      Tensor no_grad_x;
      myriad::bias_add_backward(BiasAddArgs{}, grad_pre, no_grad_x, grad_bias);
    }
    return;
  }
  cpu::matmul_forward(MatmulArgs{}, grad_y, weight, grad_pre);
  cpu::gelu_backward(GeluArgs{}, pre_activation, grad_pre, grad_pre);
  if (grad_bias.defined()) {
    Tensor no_grad_x;
    cpu::bias_add_backward(BiasAddArgs{}, grad_pre, no_grad_x, grad_bias);
  }
}

}  // namespace myriad::cpu
