// The CUDA backend's 16-bit forward outputs (mixed precision's kept GEMM inputs: LayerNorm,
// RMSNorm, GELU, SwiGLU and the fused linear + GELU writing bf16 / f16; attention with 16-bit
// products writing a 16-bit heads view of rows, and its backward reading it; the backward's kept
// 16-bit gradients: GEMM outputs, bias sums from them, SwiGLU's gradients, attention's gradients as
// heads views of 16-bit rows and RoPE's backward in place on them; the norms and residual adds on a
// 16-bit residual stream) against the CPU ops' on the same
// inputs. The device computes in f32 and rounds once, as the CPU op does, so the two differ
// at most where the f32 values (a few ulp apart: tanhf, expf) fall on either side of a rounding
// boundary — one unit in the last place of the format. On the emulated CUDA layer the launchers
// run the CPU ops: equal bit for bit there. Skipped without a GPU in myriad_gpu_tests.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda_backend_fixture.h"
#include "myriad/ops/activations.h"
#include "myriad/ops/attention.h"
#include "myriad/ops/bias_add.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/matmul.h"
#include "myriad/ops/linear.h"
#include "myriad/ops/norms.h"
#include "myriad/ops/rope.h"
#include "reference.h"

namespace myriad {
namespace {

using testing::CudaBackendTest;

class CudaSixteenBitOutputs : public CudaBackendTest, public ::testing::WithParamInterface<DType> {
 protected:
  // One unit in the last place at magnitude 1 (2^-7 bf16, 2^-10 f16), over |reference| + 1.
  double ulp() const { return GetParam() == DType::bf16 ? std::ldexp(1.0, -7) : std::ldexp(1.0, -10); }
  void expect_same_format_result(const Tensor& device, const Tensor& cpu, const char* what) {
    ASSERT_EQ(device.dtype(), GetParam()) << what;
    const std::vector<double> got = testing::to_f64(backend_->copy_to_host(device)), want = testing::to_f64(cpu);
    ASSERT_EQ(got.size(), want.size()) << what;
    double worst = 0.0, scale = 0.0;
    for (std::size_t i = 0; i < want.size(); ++i) {
      ASSERT_TRUE(std::isfinite(got[i])) << what << "[" << i << "] = " << got[i];
      worst = std::max(worst, std::abs(got[i] - want[i]));
      scale = std::max(scale, std::abs(want[i]));
    }
    EXPECT_LE(worst, ulp() * (1.0 + scale)) << what << ": max |device - cpu| " << worst;
  }
  void expect_gelu_mlp_with_a_kept_pre_activation(std::int64_t F);
};

TEST_P(CudaSixteenBitOutputs, NormsAndActivationsEqualTheCpuOps) {
  const DType format = GetParam();
  const std::int64_t N = 19, C = 136;
  const Tensor x = random({N, C}, 1), w = random({C}, 2), b = random({C}, 3), up = random({N, C}, 4);
  Tensor none;
  Tensor out = Tensor::empty({N, C}, format), mean = Tensor::empty({N}), rstd = Tensor::empty({N});
  layernorm_forward(LayernormArgs{}, x, w, b, out, mean, rstd);
  Tensor d_out = backend_->empty({N, C}, format), d_mean = backend_->empty({N}), d_rstd = backend_->empty({N});
  layernorm_forward(LayernormArgs{}, on_device(x), on_device(w), on_device(b), d_out, d_mean, d_rstd);
  expect_same_format_result(d_out, out, "layernorm out");
  expect_close(d_rstd, rstd, 1e-5, "layernorm rstd");

  rmsnorm_forward(RmsnormArgs{}, x, w, out, rstd);
  rmsnorm_forward(RmsnormArgs{}, on_device(x), on_device(w), d_out, d_rstd);
  expect_same_format_result(d_out, out, "rmsnorm out");

  gelu_forward(GeluArgs{}, x, out);
  gelu_forward(GeluArgs{}, on_device(x), d_out);
  expect_same_format_result(d_out, out, "gelu out");

  swiglu_forward(SwigluArgs{}, x, up, out);
  swiglu_forward(SwigluArgs{}, on_device(x), on_device(up), d_out);
  expect_same_format_result(d_out, out, "swiglu out");
}

TEST_P(CudaSixteenBitOutputs, FusedLinearGeluWritesTheFormatAndKeepsItsInput) {
  const DType format = GetParam();
  const std::int64_t N = 24, K = 64, F = 96;
  const Tensor x = random({N, K}, 5).to(format), w = random({F, K}, 6).to(format), b = random({F}, 7);
  Tensor pre = Tensor::empty({N, F}), y = Tensor::empty({N, F}, format);
  linear_gelu_forward(x, w, b, pre, y);
  Tensor d_pre = backend_->empty({N, F}), d_y = backend_->empty({N, F}, format);
  linear_gelu_forward(on_device(x), on_device(w), on_device(b), d_pre, d_y);
  expect_close(d_pre, pre, 2e-5, "pre_activation (f32)");
  expect_same_format_result(d_y, y, "y");
}

TEST_P(CudaSixteenBitOutputs, AttentionWritesAndReadsAHeadsViewInTheFormat) {
  const DType format = GetParam();
  const std::int64_t B = 2, H = 2, T = 40, D = 64;
  const Tensor q = random({B, H, T, D}, 8), k = random({B, H, T, D}, 9), v = random({B, H, T, D}, 10);
  const Tensor dy = random({B, H, T, D}, 11);
  AttentionArgs args;
  args.operands = format;
  Tensor rows = Tensor::empty({B, T, H * D}, format), lse = Tensor::empty({B, H, T});
  Tensor out = rows.view({B, T, H, D}).permute({0, 2, 1, 3});
  attention_forward(args, q, k, v, out, lse);
  Tensor d_rows = backend_->empty({B, T, H * D}, format), d_lse = backend_->empty({B, H, T});
  Tensor d_out = d_rows.view({B, T, H, D}).permute({0, 2, 1, 3});
  const Tensor dq_ = on_device(q), dk_ = on_device(k), dv_ = on_device(v);
  attention_forward(args, dq_, dk_, dv_, d_out, d_lse);
  expect_same_format_result(d_rows, rows, "attention out (rows)");
  expect_close(d_lse, lse, 1e-4, "attention lse");
  Tensor gq = Tensor::empty(q.shape()), gk = Tensor::empty(k.shape()), gv = Tensor::empty(v.shape());
  attention_backward(args, q, k, v, out, lse, dy, gq, gk, gv);
  Tensor d_gq = backend_->empty(q.shape()), d_gk = backend_->empty(k.shape()), d_gv = backend_->empty(v.shape());
  attention_backward(args, dq_, dk_, dv_, d_out, d_lse, on_device(dy), d_gq, d_gk, d_gv);
  // The gradients hold values of the format (ops/attention.h): one ulp apart at most.
  expect_close(d_gq, gq, ulp(), "grad_q");
  expect_close(d_gk, gk, ulp(), "grad_k");
  expect_close(d_gv, gv, ulp(), "grad_v");
}

TEST_P(CudaSixteenBitOutputs, RopeWritesTheFormatAndAttentionReadsIt) {
  const DType format = GetParam();
  const std::int64_t B = 2, T = 24, H = 2, D = 64;
  const Tensor x = random({B, T, H, D}, 12);
  Tensor rotated = Tensor::empty({B, T, H, D}, format), d_rotated = backend_->empty({B, T, H, D}, format);
  rope_forward(RopeArgs{}, x, rotated);
  rope_forward(RopeArgs{}, on_device(x), d_rotated);
  expect_same_format_result(d_rotated, rotated, "rope out");
  // The rotated keys in the format, the values f32 (as the model hands them).
  const Tensor q = random({B, T, H, D}, 13), v = random({B, T, H, D}, 14), dy = random({B, H, T, D}, 15);
  AttentionArgs args;
  args.operands = format;
  Tensor out = Tensor::empty({B, H, T, D}), lse = Tensor::empty({B, H, T});
  attention_forward(args, q.permute({0, 2, 1, 3}), rotated.permute({0, 2, 1, 3}), v.permute({0, 2, 1, 3}), out, lse);
  const Tensor dq_ = on_device(q), dv_ = on_device(v);
  Tensor d_out = backend_->empty({B, H, T, D}), d_lse = backend_->empty({B, H, T});
  attention_forward(args, dq_.permute({0, 2, 1, 3}), d_rotated.permute({0, 2, 1, 3}), dv_.permute({0, 2, 1, 3}), d_out,
                    d_lse);
  expect_close(d_out, out, 2 * ulp(), "attention out from 16-bit keys");
  Tensor gq = Tensor::empty({B, H, T, D}), gk = Tensor::empty({B, H, T, D}), gv = Tensor::empty({B, H, T, D});
  attention_backward(args, q.permute({0, 2, 1, 3}), rotated.permute({0, 2, 1, 3}), v.permute({0, 2, 1, 3}), out, lse,
                     dy, gq, gk, gv);
  Tensor d_gq = backend_->empty({B, H, T, D}), d_gk = backend_->empty({B, H, T, D});
  Tensor d_gv = backend_->empty({B, H, T, D});
  attention_backward(args, dq_.permute({0, 2, 1, 3}), d_rotated.permute({0, 2, 1, 3}), dv_.permute({0, 2, 1, 3}), d_out,
                     d_lse, on_device(dy), d_gq, d_gk, d_gv);
  expect_close(d_gk, gk, 2 * ulp(), "grad_k from 16-bit keys");
}

TEST_P(CudaSixteenBitOutputs, GemmGradientsAndBiasSumsInTheFormat) {
  const DType format = GetParam();
  const std::int64_t M = 24, K = 64, N = 48;
  const Tensor g = random({M, N}, 20).to(format), w = random({N, K}, 21).to(format), a = random({M, K}, 22).to(format);
  const MatmulArgs backward{.transpose_b = true, .accumulate_grad_b = true};
  Tensor grad_a = Tensor::empty({M, K}, format), grad_w = Tensor::zeros({N, K});
  matmul_backward(backward, a, w, g, grad_a, grad_w);
  Tensor d_grad_a = backend_->empty({M, K}, format), d_grad_w = on_device(Tensor::zeros({N, K}));
  matmul_backward(backward, on_device(a), on_device(w), on_device(g), d_grad_a, d_grad_w);
  expect_same_format_result(d_grad_a, grad_a, "matmul_backward grad_a");
  expect_close(d_grad_w, grad_w, 1e-4, "matmul_backward grad_b (f32)");
  Tensor out = Tensor::empty({M, N}, format), d_out = backend_->empty({M, N}, format);
  matmul_forward(MatmulArgs{.transpose_b = true}, a, w.view({N, K}), out);
  matmul_forward(MatmulArgs{.transpose_b = true}, on_device(a), on_device(w), d_out);
  expect_same_format_result(d_out, out, "matmul_forward out");
  Tensor bias = Tensor::zeros({N}), d_bias = on_device(Tensor::zeros({N})), none, d_none;
  bias_add_backward(BiasAddArgs{}, g, none, bias);
  bias_add_backward(BiasAddArgs{}, on_device(g), d_none, d_bias);
  expect_close(d_bias, bias, 1e-4, "bias sums of 16-bit rows");
}

TEST_P(CudaSixteenBitOutputs, SwigluAttentionAndRopeGradientsInTheFormat) {
  const DType format = GetParam();
  const std::int64_t n = 1031;
  const Tensor gate = random({n}, 23), up = random({n}, 24), grad = random({n}, 25);
  Tensor gg = Tensor::empty({n}, format), gu = Tensor::empty({n}, format);
  swiglu_backward(SwigluArgs{}, gate, up, grad, gg, gu);
  Tensor d_gg = backend_->empty({n}, format), d_gu = backend_->empty({n}, format);
  swiglu_backward(SwigluArgs{}, on_device(gate), on_device(up), on_device(grad), d_gg, d_gu);
  expect_same_format_result(d_gg, gg, "swiglu grad_gate");
  expect_same_format_result(d_gu, gu, "swiglu grad_up");

  // The model's layout: grad_out and the q, k, v gradients as heads views of 16-bit rows.
  const std::int64_t B = 2, H = 2, T = 40, D = 64, W = H * D;
  auto heads = [&](const Tensor& rows, std::int64_t first) {
    const std::int64_t width = rows.size(2);
    return Tensor::from_storage(rows.storage(), {B, H, T, D}, {T * width, D, width, 1}, rows.offset() + first,
                                rows.dtype());
  };
  const Tensor q = random({B, H, T, D}, 26), k = random({B, H, T, D}, 27), v = random({B, H, T, D}, 28);
  const Tensor dy_rows = random({B, T, W}, 29).to(format);
  AttentionArgs args;
  args.operands = format;
  args.causal = true;
  Tensor out = Tensor::empty({B, H, T, D}), lse = Tensor::empty({B, H, T});
  attention_forward(args, q, k, v, out, lse);
  Tensor grads = Tensor::empty({B, T, 3 * W}, format);
  Tensor gq = heads(grads, 0), gk = heads(grads, W), gv = heads(grads, 2 * W);
  attention_backward(args, q, k, v, out, lse, heads(dy_rows, 0), gq, gk, gv);
  const Tensor d_out = on_device(out), d_lse = on_device(lse), d_dy_rows = on_device(dy_rows);
  Tensor d_grads = backend_->empty({B, T, 3 * W}, format);
  Tensor d_gq = heads(d_grads, 0), d_gk = heads(d_grads, W), d_gv = heads(d_grads, 2 * W);
  attention_backward(args, on_device(q), on_device(k), on_device(v), d_out, d_lse, heads(d_dy_rows, 0), d_gq, d_gk,
                     d_gv);
  expect_same_format_result(d_grads, grads, "q, k, v gradients (16-bit rows)");
  // RoPE's backward in place on the (B, T, H, D) rows-of-heads view of the q gradient.
  auto q_rows = [&](const Tensor& rows) {
    return Tensor::from_storage(rows.storage(), {B, T, H, D}, {T * 3 * W, 3 * W, D, 1}, rows.offset(), rows.dtype());
  };
  Tensor host_q = q_rows(grads), device_q = q_rows(d_grads);
  rope_backward(RopeArgs{}, host_q, host_q);
  rope_backward(RopeArgs{}, device_q, device_q);
  expect_same_format_result(d_grads, grads, "q gradient after RoPE's backward");
}

// The residual stream in the format: the norms read it (forward into f32 or 16-bit, backward) and
// the residual adds read it as b or write it as out — the device's f32 math on the same widened
// values as the CPU op's, so equal up to summation order (and one ulp where a sum is rounded).
TEST_P(CudaSixteenBitOutputs, NormsAndResidualAddsOnASixteenBitStream) {
  const DType format = GetParam();
  const std::int64_t N = 300, C = 136;  // > 256 rows: the norm gradients' two-pass reduction
  const Tensor x = random({N, C}, 20).to(format), w = random({C}, 21), b = random({C}, 22), g = random({N, C}, 23);
  const Tensor d_x = on_device(x), d_w = on_device(w), d_b = on_device(b), d_g = on_device(g);
  for (DType out_format : {DType::f32, format}) {
    Tensor out = Tensor::empty({N, C}, out_format), mean = Tensor::empty({N}), rstd = Tensor::empty({N});
    Tensor d_out = backend_->empty({N, C}, out_format), d_mean = backend_->empty({N}), d_rstd = backend_->empty({N});
    layernorm_forward(LayernormArgs{}, x, w, b, out, mean, rstd);
    layernorm_forward(LayernormArgs{}, d_x, d_w, d_b, d_out, d_mean, d_rstd);
    if (out_format == DType::f32) {
      expect_close(d_out, out, 1e-5, "layernorm out (f32) from the stream");
    } else {
      expect_same_format_result(d_out, out, "layernorm out from the stream");
    }
    expect_close(d_rstd, rstd, 1e-5, "layernorm rstd from the stream");
    rmsnorm_forward(RmsnormArgs{}, x, w, out, rstd);
    rmsnorm_forward(RmsnormArgs{}, d_x, d_w, d_out, d_rstd);
    if (out_format == DType::f32) {
      expect_close(d_out, out, 1e-5, "rmsnorm out (f32) from the stream");
    } else {
      expect_same_format_result(d_out, out, "rmsnorm out from the stream");
    }
  }
  Tensor mean = Tensor::empty({N}), rstd = Tensor::empty({N}), h = Tensor::empty({N, C});
  layernorm_forward(LayernormArgs{}, x, w, b, h, mean, rstd);
  Tensor gx = Tensor::empty({N, C}), gw = Tensor::zeros({C}), gb = Tensor::zeros({C});
  layernorm_backward(LayernormArgs{}, x, w, mean, rstd, g, gx, gw, gb);
  Tensor d_gx = backend_->empty({N, C}), d_gw = on_device(Tensor::zeros({C})), d_gb = on_device(Tensor::zeros({C}));
  layernorm_backward(LayernormArgs{}, d_x, d_w, on_device(mean), on_device(rstd), d_g, d_gx, d_gw, d_gb);
  expect_close(d_gx, gx, 1e-4, "layernorm grad_x from the stream");
  expect_close(d_gw, gw, 1e-3, "layernorm grad_weight from the stream");
  expect_close(d_gb, gb, 1e-3, "layernorm grad_bias");
  rmsnorm_forward(RmsnormArgs{}, x, w, h, rstd);
  zero(gw);
  rmsnorm_backward(RmsnormArgs{}, x, w, rstd, g, gx, gw);
  Tensor d_gw2 = on_device(Tensor::zeros({C}));
  rmsnorm_backward(RmsnormArgs{}, d_x, d_w, on_device(rstd), d_g, d_gx, d_gw2);
  expect_close(d_gx, gx, 1e-4, "rmsnorm grad_x from the stream");
  expect_close(d_gw2, gw, 1e-3, "rmsnorm grad_weight from the stream");
  // x_mid = proj + x (f32 out from the 16-bit stream), in place; y = x_mid + mlp rounded into it.
  const Tensor a = random({N, C}, 24);
  Tensor sum = Tensor::empty({N, C}), d_sum = on_device(a);
  add_forward(AddArgs{}, a, x, sum);
  add_forward(AddArgs{}, d_sum, d_x, d_sum);
  expect_close(d_sum, sum, 0.0, "f32 sum from the stream");
  Tensor y = Tensor::empty({N, C}, format), d_y = backend_->empty({N, C}, format);
  add_forward(AddArgs{}, a, g, y);
  add_forward(AddArgs{}, on_device(a), d_g, d_y);
  expect_same_format_result(d_y, y, "the stream written by a residual add");
}

// SwiGLU on 16-bit gate and up (mixed precision's kept pre-activations): out and gradients in the
// format, against the CPU op on the same 16-bit inputs.
TEST_P(CudaSixteenBitOutputs, SwigluOnSixteenBitGateAndUp) {
  const DType format = GetParam();
  const std::int64_t N = 19, F = 136;
  const Tensor gate = random({N, F}, 30).to(format), up = random({N, F}, 31).to(format), g = random({N, F}, 32);
  Tensor out = Tensor::empty({N, F}, format), d_out = backend_->empty({N, F}, format);
  swiglu_forward(SwigluArgs{}, gate, up, out);
  swiglu_forward(SwigluArgs{}, on_device(gate), on_device(up), d_out);
  expect_same_format_result(d_out, out, "swiglu out from 16-bit inputs");
  Tensor gg = Tensor::empty({N, F}, format), gu = Tensor::empty({N, F}, format);
  Tensor d_gg = backend_->empty({N, F}, format), d_gu = backend_->empty({N, F}, format);
  swiglu_backward(SwigluArgs{}, gate, up, g, gg, gu);
  swiglu_backward(SwigluArgs{}, on_device(gate), on_device(up), on_device(g), d_gg, d_gu);
  expect_same_format_result(d_gg, gg, "swiglu grad_gate from 16-bit inputs");
  expect_same_format_result(d_gu, gu, "swiglu grad_up from 16-bit inputs");
}

// A GELU MLP's pre-activation kept in the format: the forward writes it and y (the GELU of the kept
// value), GELU recomputed from it, and the backward reads it into a grad_pre of the format and the
// f32 bias gradient — each against the CPU op (within one ulp: GEMM sums differ in order).
TEST_P(CudaSixteenBitOutputs, GeluMlpWithAKeptSixteenBitPreActivation) {
  for (const std::int64_t F : {96, 100}) {  // 100: not a multiple of 8, no cuBLASLt epilogue (the kernels)
    SCOPED_TRACE(::testing::Message() << "F " << F);
    expect_gelu_mlp_with_a_kept_pre_activation(F);
  }
}

void CudaSixteenBitOutputs::expect_gelu_mlp_with_a_kept_pre_activation(std::int64_t F) {
  const DType format = GetParam();
  const std::int64_t N = 24, K = 64, n = 32;
  const Tensor x = random({N, K}, 40).to(format), w = random({F, K}, 41).to(format), b = random({F}, 42);
  Tensor pre = Tensor::empty({N, F}, format), y = Tensor::empty({N, F}, format);
  Tensor d_pre = backend_->empty({N, F}, format), d_y = backend_->empty({N, F}, format);
  linear_gelu_forward(x, w, b, pre, y);
  linear_gelu_forward(on_device(x), on_device(w), on_device(b), d_pre, d_y);
  expect_same_format_result(d_pre, pre, "kept pre_activation");
  expect_same_format_result(d_y, y, "y");
  Tensor again = Tensor::empty({N, F}, format), d_again = backend_->empty({N, F}, format);
  gelu_forward(GeluArgs{}, pre, again);
  gelu_forward(GeluArgs{}, on_device(pre), d_again);
  expect_same_format_result(d_again, again, "GELU recomputed from the kept pre-activation");
  const Tensor grad_y = random({N, n}, 43).to(format), w_out = random({n, F}, 44).to(format);
  Tensor grad_pre = Tensor::empty({N, F}, format), d_grad_pre = backend_->empty({N, F}, format);
  Tensor grad_bias = random({F}, 45), d_grad_bias = on_device(grad_bias);
  linear_dgelu_backward(grad_y, w_out, pre, grad_pre, grad_bias);
  linear_dgelu_backward(on_device(grad_y), on_device(w_out), on_device(pre), d_grad_pre, d_grad_bias);
  expect_same_format_result(d_grad_pre, grad_pre, "grad_pre");
  expect_close(d_grad_bias, grad_bias, ulp(), "grad_bias (f32, the column sums of the kept grad_pre)");
  const Tensor g = random({N, F}, 46);
  Tensor gx = Tensor::empty({N, F}, format), d_gx = backend_->empty({N, F}, format);
  gelu_backward(GeluArgs{}, pre, g, gx);
  gelu_backward(GeluArgs{}, on_device(pre), on_device(g), d_gx);
  expect_same_format_result(d_gx, gx, "gelu_backward on the kept pre-activation");
}

INSTANTIATE_TEST_SUITE_P(Formats, CudaSixteenBitOutputs, ::testing::Values(DType::bf16, DType::f16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

}  // namespace
}  // namespace myriad
