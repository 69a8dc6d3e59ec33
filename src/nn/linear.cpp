// Linear layers on matmul + bias_add; residual adds.
#include "myriad/nn/linear.h"

#include "myriad/ops/bias_add.h"
#include "myriad/ops/matmul.h"

namespace myriad::nn {

void linear_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y) {
  matmul_forward(MatmulArgs{.transpose_b = true}, x, weight, y);
  if (bias.defined()) bias_add_forward(BiasAddArgs{}, y, bias, y);
}

void linear_backward(const Tensor& x, const Tensor& weight, const Tensor& grad_y, Tensor& grad_x, bool accumulate_dx,
                     Tensor& grad_weight, Tensor& grad_bias) {
  MatmulArgs args{.transpose_b = true, .accumulate_grad_a = accumulate_dx, .accumulate_grad_b = true};
  matmul_backward(args, x, weight, grad_y, grad_x, grad_weight);
  if (grad_bias.defined()) {
    Tensor no_grad_x;
    bias_add_backward(BiasAddArgs{}, grad_y, no_grad_x, grad_bias);
  }
}

static void check_same(const char* op, const Tensor& a, const Tensor& b) {
  MYRIAD_CHECK(a.shape() == b.shape() && a.is_contiguous() && b.is_contiguous() && a.dtype() == DType::f32 &&
                   b.dtype() == DType::f32,
               op << ": needs contiguous f32 tensors of one shape, got " << a.describe() << " and " << b.describe());
}

void add_into(Tensor& dst, const Tensor& src) {
  check_same("add_into", dst, src);
  float* d = dst.data<float>();
  const float* s = src.data<float>();
  const std::int64_t n = dst.numel();
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
  for (std::int64_t i = 0; i < n; ++i) d[i] += s[i];
}

void add_row_bias(Tensor& out, const Tensor& bias) {
  const std::int64_t m = bias.numel();
  MYRIAD_CHECK(out.is_contiguous() && bias.is_contiguous() && out.dtype() == DType::f32 &&
                   bias.dtype() == DType::f32 && m > 0 && out.size(out.dim() - 1) == m,
               "add_row_bias: out " << out.describe() << " must be contiguous f32 ending in the bias size "
                                    << bias.describe());
  float* o = out.data<float>();
  const float* b = bias.data<float>();
  const std::int64_t rows = out.numel() / m;
#pragma omp parallel for schedule(static) if (rows * m > (1 << 16))
  for (std::int64_t r = 0; r < rows; ++r) {
    for (std::int64_t j = 0; j < m; ++j) o[r * m + j] += b[j];
  }
}

void add(const Tensor& a, const Tensor& b, Tensor& out) {
  check_same("add", a, b);
  check_same("add", a, out);
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* po = out.data<float>();
  const std::int64_t n = out.numel();
#pragma omp parallel for simd schedule(static) if (n > (1 << 16))
  for (std::int64_t i = 0; i < n; ++i) po[i] = pa[i] + pb[i];
}

}  // namespace myriad::nn
