// CPU linear: matmul (x W^T), then bias_add and GELU in place — the reference of the fused op.
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

}  // namespace myriad::cpu
