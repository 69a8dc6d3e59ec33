// The backward ops whose gradients mixed precision keeps in a 16-bit GEMM operand format (the
// attention's output gradient and q, k, v gradients, SwiGLU's gate and up gradients; the GEMMs that
// write or read them, RoPE's backward in place on the q, k gradients, a bias gradient summed from
// them): a bf16 / f16 output holds, bit for bit, the f32 op's result rounded once to nearest even; a
// 16-bit input gives the f32 op's result on its exactly widened values; wrong dtypes are refused
// naming the op and the argument.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "myriad/ops/activations.h"
#include "myriad/ops/attention.h"
#include "myriad/ops/bias_add.h"
#include "myriad/ops/matmul.h"
#include "myriad/ops/rope.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using testing::expect_error_naming;
using testing::to_f64;

void expect_gradient_rounded_from(const Tensor& sixteen, const Tensor& wide, const char* what) {
  const Tensor rounded = wide.to(sixteen.dtype()), packed = sixteen.is_contiguous() ? sixteen : sixteen.clone();
  ASSERT_EQ(packed.nbytes(), rounded.nbytes()) << what;
  EXPECT_EQ(std::memcmp(packed.raw_data(), rounded.raw_data(), rounded.nbytes()), 0)
      << what << " (" << dtype_name(sixteen.dtype()) << "): not the f32 values rounded to nearest even";
}

class SixteenBitGradients : public ::testing::TestWithParam<DType> {};

TEST_P(SixteenBitGradients, GemmOutputsAndBiasSums) {
  const DType format = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t M = 13, K = 40, N = 24;
  const Tensor a = testing::random_tensor({M, K}, seed, 0).to(format),
               w = testing::random_tensor({N, K}, seed, 1).to(format);
  const MatmulArgs forward{.transpose_b = true};
  Tensor wide = Tensor::empty({M, N}), narrow = Tensor::empty({M, N}, format);
  matmul_forward(forward, a, w, wide);
  matmul_forward(forward, a, w, narrow);
  expect_gradient_rounded_from(narrow, wide, "matmul_forward out");

  // The backward's grad_a in the format (an input gradient kept for the next GEMMs); grad_b f32.
  const Tensor g = testing::random_tensor({M, N}, seed, 2).to(format);
  const MatmulArgs backward{.transpose_b = true, .accumulate_grad_b = true};
  Tensor grad_a = Tensor::empty({M, K}), grad_a16 = Tensor::empty({M, K}, format);
  Tensor grad_w = Tensor::zeros({N, K}), grad_w2 = Tensor::zeros({N, K});
  matmul_backward(backward, a, w, g, grad_a, grad_w);
  matmul_backward(backward, a, w, g, grad_a16, grad_w2);
  expect_gradient_rounded_from(grad_a16, grad_a, "matmul_backward grad_a");
  EXPECT_EQ(to_f64(grad_w2), to_f64(grad_w)) << "grad_b stays the f32 sums";

  // A bias gradient from 16-bit rows: the column sums of their exact values.
  Tensor bias16 = Tensor::zeros({N}), bias32 = Tensor::zeros({N}), none;
  bias_add_backward(BiasAddArgs{}, g, none, bias16);
  bias_add_backward(BiasAddArgs{}, g.to(DType::f32), none, bias32);
  EXPECT_EQ(to_f64(bias16), to_f64(bias32));
  std::vector<double> gv = to_f64(g), sums(N, 0.0);
  for (std::int64_t i = 0; i < M * N; ++i) sums[i % N] += gv[i];
  testing::expect_close(bias16, sums, 1e-6, 1e-6, "bias sums vs float64");

  Tensor f32_a = testing::random_tensor({M, K}, seed, 3), f32_w = testing::random_tensor({N, K}, seed, 4);
  expect_error_naming([&] { matmul_forward(forward, f32_a, f32_w, narrow); }, {"matmul_forward", "'out'", "f32"});
  expect_error_naming([&] { matmul_forward(MatmulArgs{.transpose_b = true, .accumulate = true}, a, w, narrow); },
                      {"matmul_forward", "'out'", "accumulates"});
  Tensor grad_x16 = Tensor::empty({M, N}, format);
  expect_error_naming([&] { bias_add_backward(BiasAddArgs{}, g, grad_x16, bias16); }, {"bias_add_backward", "grad_x"});
}

TEST_P(SixteenBitGradients, SwigluGradientsRoundTheF32ValuesOnce) {
  const DType format = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const Shape shape = {3, 5, 67};
  const Tensor gate = testing::random_tensor(shape, seed, 0, -4.0f, 4.0f), up = testing::random_tensor(shape, seed, 1);
  const Tensor grad = testing::random_tensor(shape, seed, 2);
  Tensor gg = Tensor::empty(shape), gu = Tensor::empty(shape);
  Tensor gg16 = Tensor::empty(shape, format), gu16 = Tensor::empty(shape, format), none;
  swiglu_backward(SwigluArgs{}, gate, up, grad, gg, gu);
  swiglu_backward(SwigluArgs{}, gate, up, grad, gg16, gu16);
  expect_gradient_rounded_from(gg16, gg, "swiglu grad_gate");
  expect_gradient_rounded_from(gu16, gu, "swiglu grad_up");
  // float64: d/dg = go u s (1 + g (1 - s)), d/du = go g s.
  std::vector<double> g = to_f64(gate), u = to_f64(up), go = to_f64(grad), dg(g.size()), du(g.size());
  for (std::size_t i = 0; i < g.size(); ++i) {
    const double s = 1.0 / (1.0 + std::exp(-g[i]));
    dg[i] = go[i] * u[i] * s * (1.0 + g[i] * (1.0 - s));
    du[i] = go[i] * g[i] * s;
  }
  const double half_ulp = format == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11);
  testing::expect_close(gg16, dg, 1e-6, half_ulp, "swiglu 16-bit grad_gate vs float64");
  testing::expect_close(gu16, du, 1e-6, half_ulp, "swiglu 16-bit grad_up vs float64");
  Tensor gate_only = Tensor::empty(shape, format);
  swiglu_backward(SwigluArgs{}, gate, up, grad, gate_only, none);
  expect_gradient_rounded_from(gate_only, gg, "swiglu grad_gate alone");
  expect_error_naming([&] { swiglu_backward(SwigluArgs{}, gate, up, grad, gg16, gu); },
                      {"swiglu_backward", "one dtype"});
}

// The model's layout: q, k, v gradients as heads views of one packed 16-bit (B, T, 3 H D) tensor,
// grad_out a heads view of 16-bit rows; then RoPE's backward in place on the q view.
TEST_P(SixteenBitGradients, AttentionAndRopeBackwardOnHeadsViewsInTheFormat) {
  const DType format = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t B = 2, T = 9, H = 2, D = 64, W = H * D;
  auto heads = [&](const Tensor& rows, std::int64_t first) {  // (B, H, T, D) view of columns [first, first + W)
    const std::int64_t width = rows.size(2);
    return Tensor::from_storage(rows.storage(), {B, H, T, D}, {T * width, D, width, 1}, rows.offset() + first,
                                rows.dtype());
  };
  const Tensor q = testing::random_tensor({B, H, T, D}, seed, 0), k = testing::random_tensor({B, H, T, D}, seed, 1);
  const Tensor v = testing::random_tensor({B, H, T, D}, seed, 2);
  AttentionArgs args;
  args.causal = true;
  args.operands = format;
  Tensor out = Tensor::empty({B, H, T, D}), lse = Tensor::empty({B, H, T});
  attention_forward(args, q, k, v, out, lse);
  const Tensor g_rows = testing::random_tensor({B, T, W}, seed, 3);
  const Tensor g16_rows = g_rows.to(format);
  Tensor grads = Tensor::empty({B, T, 3 * W}), grads16 = Tensor::empty({B, T, 3 * W}, format);
  Tensor dq = heads(grads, 0), dk = heads(grads, W), dv = heads(grads, 2 * W);
  Tensor dq16 = heads(grads16, 0), dk16 = heads(grads16, W), dv16 = heads(grads16, 2 * W);
  attention_backward(args, q, k, v, out, lse, heads(g_rows, 0), dq, dk, dv);
  attention_backward(args, q, k, v, out, lse, heads(g16_rows, 0), dq16, dk16, dv16);
  expect_gradient_rounded_from(grads16, grads, "q, k, v gradients (their values are of the format already)");

  // RoPE's backward in place on the (B, T, H, D) rows-of-heads view of the q gradient.
  auto rows_of_heads = [&](Tensor& rows) {
    return Tensor::from_storage(rows.storage(), {B, T, H, D}, {T * 3 * W, 3 * W, D, 1}, rows.offset(), rows.dtype());
  };
  Tensor q_rows = rows_of_heads(grads), q_rows16 = rows_of_heads(grads16);
  rope_backward(RopeArgs{}, q_rows, q_rows);
  rope_backward(RopeArgs{}, q_rows16, q_rows16);
  expect_gradient_rounded_from(grads16, grads, "q gradient after RoPE's backward (k, v untouched)");

  AttentionArgs wide_products = args;
  wide_products.operands = DType::f32;
  expect_error_naming([&] { attention_backward(wide_products, q, k, v, out, lse, heads(g16_rows, 0), dq, dk, dv); },
                      {"attention_backward", "'grad_out'", "must be f32"});
}

INSTANTIATE_TEST_SUITE_P(Formats, SixteenBitGradients, ::testing::Values(DType::bf16, DType::f16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

}  // namespace
}  // namespace myriad
