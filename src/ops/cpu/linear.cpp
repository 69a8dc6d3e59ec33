// CPU linear: matmul (x W^T), then bias_add and GELU in place — the reference of the fused ops.
// The GELU MLP's pair runs one pass after its GEMM instead of two: the forward adds the bias and
// takes the GELU per row (writing the pre-activation and y), the backward takes GELU's gradient
// and sums the bias gradient in the same row-chunked pass (row_chunks.h: deterministic, the
// chunking depends on the row count only). The per-element math is gelu_math.h's, the GELU ops'.
#include "cpu_clones.h"
#include "myriad/ops/activations.h"
#include "myriad/ops/bias_add.h"
#include "myriad/ops/linear.h"
#include "myriad/ops/matmul.h"
#include "gelu_math.h"
#include "parallel_threshold.h"
#include "row_chunks.h"

namespace myriad::cpu {

namespace {

// One row of the backward's fused pass: g = GELU'(pre) * g in place, and each value added to the
// bias gradient's partial. A function of its own (not the lambda's body) so that a portable
// build's run-time dispatch covers it (cpu_clones.h).
MYRIAD_CPU_CLONES void dgelu_row_summing(const float* pre_row, float* g_row, std::int64_t channels, float* partial) {
#pragma omp simd
  for (std::int64_t c = 0; c < channels; ++c) {
    const float d = gelu_gradient(pre_row[c], g_row[c]);
    g_row[c] = d;
    partial[c] += d;
  }
}

}  // namespace

void linear_forward(const LinearArgs& args, const Tensor& x, const Tensor& weight, const Tensor& bias, Tensor& y) {
  cpu::matmul_forward(MatmulArgs{.transpose_b = true}, x, weight, y);
  if (bias.defined()) cpu::bias_add_forward(BiasAddArgs{}, y, bias, y);
  if (args.gelu) cpu::gelu_forward(GeluArgs{}, y, y);
}

MYRIAD_CPU_CLONES void linear_gelu_forward(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                           Tensor& pre_activation, Tensor& y) {
  cpu::matmul_forward(MatmulArgs{.transpose_b = true}, x, weight, pre_activation);
  const std::int64_t channels = pre_activation.size(-1), rows = pre_activation.numel() / channels;
  float* pre = pre_activation.data<float>();
  float* out = y.data<float>();
  const float* b = bias.defined() ? bias.data<float>() : nullptr;
#pragma omp parallel for schedule(static) if (rows * channels >= kParallelMinElements)
  for (std::int64_t n = 0; n < rows; ++n) {
    float* pre_row = pre + n * channels;
    float* out_row = out + n * channels;
    if (b != nullptr) {
#pragma omp simd
      for (std::int64_t c = 0; c < channels; ++c) {
        const float v = pre_row[c] + b[c];
        pre_row[c] = v;
        out_row[c] = gelu_value(v);
      }
    } else {
#pragma omp simd
      for (std::int64_t c = 0; c < channels; ++c) out_row[c] = gelu_value(pre_row[c]);
    }
  }
}

MYRIAD_CPU_CLONES void linear_dgelu_backward(const Tensor& grad_y, const Tensor& weight, const Tensor& pre_activation,
                                             Tensor& grad_pre, Tensor& grad_bias) {
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
  if (!grad_bias.defined()) {
    cpu::gelu_backward(GeluArgs{}, pre_activation, grad_pre, grad_pre);
    return;
  }
  const std::int64_t channels = grad_pre.size(-1), rows = grad_pre.numel() / channels;
  if (rows == 0) return;
  const float* pre = pre_activation.data<float>();
  float* g = grad_pre.data<float>();
  auto row = [&](std::int64_t n, float* partial) {
    dgelu_row_summing(pre + n * channels, g + n * channels, channels, partial);
  };
  const std::vector<float> partials = for_rows_chunked(rows, channels, rows * channels >= kParallelMinElements, row);
  add_chunk_sums(partials, channels, 0, channels, grad_bias.data<float>());
}

}  // namespace myriad::cpu
