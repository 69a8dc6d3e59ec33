// nn::fp8_linear_forward / backward: quantise, FP8 GEMM, bias (nn/fp8_linear.h).
#include "myriad/nn/fp8_linear.h"

#include "myriad/core/error.h"
#include "myriad/nn/linear.h"
#include "myriad/ops/bias_add.h"
#include "myriad/ops/fp8.h"
#include "myriad/ops/placement.h"

namespace myriad::nn {

namespace {

// A tensor as rows of its last dim.
Tensor rows_of(const Tensor& t) { return t.view({t.numel() / t.size(-1), t.size(-1)}); }

struct Quantized {
  Tensor values, transposed;
  Tensor dequant;  // 1 / the scale, one f32 on the placement (Fp8Scaling::dequant_slot)
};

// `t` (rows of its last dim) in the role's format under this step's scale: its values and/or
// their transpose; the amax is recorded every time (a max: recording twice changes nothing).
Quantized quantize(const Tensor& t, Fp8Scaling& scaling, std::int64_t linear, Fp8Role role, bool values,
                   bool transposed) {
  const ops::Placement placement = ops::placement_of(t, "fp8 operand");
  const Tensor rows = rows_of(t);
  const DType format = Fp8Scaling::format_of(role);
  Quantized q;
  scaling.scale(linear, role, rows);  // just in time on the slot's first tensor
  q.dequant = scaling.dequant_slot(linear, role);
  // fp8_quantize always writes the row-major values; a caller that needs only the transpose
  // still gets them (a scratch the size of the transpose).
  q.values = placement.empty(rows.shape(), format);
  if (transposed) q.transposed = placement.empty({rows.size(1), rows.size(0)}, format);
  Tensor amax = scaling.amax_slot(linear, role);
  fp8_quantize(rows, scaling.scale_slot(linear, role), q.values, q.transposed, amax);
  if (!values) q.values = Tensor();
  return q;
}

// dx (=, or +=) = (dyq Wq) / (s_dy s_w): dyq's values and W's transposed codes.
void input_grad_gemm(const Quantized& dyq, const Fp8Weight& weight, Tensor& grad_x, bool accumulate_dx) {
  MYRIAD_CHECK(weight.transposed, "fp8 linear: the input gradient needs the weight's transposed codes");
  Tensor dx = rows_of(grad_x);
  fp8_gemm(Fp8GemmArgs{.accumulate = accumulate_dx}, dyq.values, dyq.dequant, weight.codes, weight.dequant, dx);
}

}  // namespace

Fp8Weight fp8_quantize_weight(const Tensor& weight, bool transposed, Fp8Scaling& scaling, std::int64_t linear) {
  Quantized q = quantize(weight, scaling, linear, Fp8Role::weight, !transposed, transposed);
  return Fp8Weight{.codes = transposed ? q.transposed : q.values, .dequant = q.dequant, .transposed = transposed};
}

void fp8_linear_forward(const Tensor& x, const Fp8Weight& weight, const Tensor& bias, Tensor& y, Fp8Scaling& scaling,
                        std::int64_t linear) {
  MYRIAD_CHECK(!weight.transposed, "fp8 linear: the forward needs the weight's row-major codes");
  const Quantized xq = quantize(x, scaling, linear, Fp8Role::input, true, false);
  Tensor out = rows_of(y);
  fp8_gemm(Fp8GemmArgs{}, xq.values, xq.dequant, weight.codes, weight.dequant, out);
  if (bias.defined()) add_row_bias(out, bias);
}

void fp8_linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y, Fp8Scaling& scaling,
                        std::int64_t linear) {
  fp8_linear_forward(x, fp8_quantize_weight(weight, false, scaling, linear), bias, y, scaling, linear);
}

void fp8_linear_input_grad(const Tensor& grad_y, const Fp8Weight& weight, Tensor& grad_x, bool accumulate_dx,
                           Fp8Scaling& scaling, std::int64_t linear) {
  const Quantized dyq = quantize(grad_y, scaling, linear, Fp8Role::grad, true, false);
  input_grad_gemm(dyq, weight, grad_x, accumulate_dx);
}

void fp8_linear_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_y, Tensor& grad_x,
                         bool accumulate_dx, Tensor& grad_weight, Tensor& grad_bias, Fp8Scaling& scaling,
                         std::int64_t linear) {
  const Quantized dyq = quantize(grad_y, scaling, linear, Fp8Role::grad, grad_x.defined(), grad_weight.defined());
  if (grad_x.defined()) input_grad_gemm(dyq, fp8_quantize_weight(weight, true, scaling, linear), grad_x, accumulate_dx);
  if (grad_weight.defined()) {
    const Quantized xq = quantize(x, scaling, linear, Fp8Role::input, false, true);
    fp8_gemm(Fp8GemmArgs{.accumulate = true}, dyq.transposed, dyq.dequant, xq.transposed, xq.dequant, grad_weight);
  }
  if (grad_bias.defined()) {
    Tensor no_grad_x;
    bias_add_backward(BiasAddArgs{}, grad_y, no_grad_x, grad_bias);
  }
}

}  // namespace myriad::nn
