// nn::fp8_linear_forward / backward: quantise, FP8 GEMM, bias (nn/fp8_linear.h).
#include "myriad/nn/fp8_linear.h"

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
  float scale = 1.0f;
};

// `t` (rows of its last dim) in the role's format under this step's scale: its values and/or
// their transpose; the amax is recorded every time (a max: recording twice changes nothing).
Quantized quantize(const Tensor& t, Fp8Scaling& scaling, std::int64_t linear, Fp8Role role, bool values,
                   bool transposed) {
  const ops::Placement placement = ops::placement_of(t, "fp8 operand");
  const Tensor rows = rows_of(t);
  const DType format = Fp8Scaling::format_of(role);
  Quantized q;
  q.scale = scaling.scale(linear, role, rows);
  // fp8_quantize always writes the row-major values; a caller that needs only the transpose
  // still gets them (a scratch the size of the transpose).
  q.values = placement.empty(rows.shape(), format);
  if (transposed) q.transposed = placement.empty({rows.size(1), rows.size(0)}, format);
  Tensor amax = scaling.amax_slot(linear, role);
  fp8_quantize(Fp8QuantizeArgs{.scale = q.scale}, rows, q.values, q.transposed, amax);
  if (!values) q.values = Tensor();
  return q;
}

}  // namespace

void fp8_linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y, Fp8Scaling& scaling,
                        std::int64_t linear) {
  const Quantized xq = quantize(x, scaling, linear, Fp8Role::input, true, false);
  const Quantized wq = quantize(weight, scaling, linear, Fp8Role::weight, true, false);
  Tensor out = rows_of(y);
  fp8_gemm(Fp8GemmArgs{.alpha = 1.0f / (xq.scale * wq.scale)}, xq.values, wq.values, out);
  if (bias.defined()) add_row_bias(out, bias);
}

void fp8_linear_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_y, Tensor& grad_x,
                         bool accumulate_dx, Tensor& grad_weight, Tensor& grad_bias, Fp8Scaling& scaling,
                         std::int64_t linear) {
  const Quantized dyq = quantize(grad_y, scaling, linear, Fp8Role::grad, grad_x.defined(), grad_weight.defined());
  if (grad_x.defined()) {
    const Quantized wq = quantize(weight, scaling, linear, Fp8Role::weight, false, true);
    Tensor dx = rows_of(grad_x);
    fp8_gemm(Fp8GemmArgs{.alpha = 1.0f / (dyq.scale * wq.scale), .accumulate = accumulate_dx}, dyq.values,
             wq.transposed, dx);
  }
  if (grad_weight.defined()) {
    const Quantized xq = quantize(x, scaling, linear, Fp8Role::input, false, true);
    fp8_gemm(Fp8GemmArgs{.alpha = 1.0f / (dyq.scale * xq.scale), .accumulate = true}, dyq.transposed, xq.transposed,
             grad_weight);
  }
  if (grad_bias.defined()) {
    Tensor no_grad_x;
    bias_add_backward(BiasAddArgs{}, grad_y, no_grad_x, grad_bias);
  }
}

}  // namespace myriad::nn
