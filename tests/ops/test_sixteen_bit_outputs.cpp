// The forward ops whose output mixed precision keeps as a 16-bit GEMM operand (LayerNorm, RMSNorm,
// GELU, SwiGLU, the fused linear + GELU; attention with 16-bit products, whose out is a strided
// heads view of rows): a bf16 / f16 output holds, bit for bit, the f32 op's output rounded to
// nearest even (attention's backward reads it to the same gradients), the saved statistics are the f32 call's, each
// value is within half a unit in the last place of the 16-bit format of a float64 reference, and a wrong output dtype
// or shape is refused naming the op and the argument.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "myriad/ops/activations.h"
#include "myriad/ops/attention.h"
#include "myriad/ops/linear.h"
#include "myriad/ops/norms.h"
#include "myriad/ops/rope.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using testing::expect_error_naming;
using testing::to_f64;

// The same bytes: a 16-bit output against the f32 output rounded by core/half.h.
void expect_rounded_from(const Tensor& sixteen, const Tensor& wide, const char* what) {
  const Tensor rounded = wide.to(sixteen.dtype());
  ASSERT_EQ(sixteen.nbytes(), rounded.nbytes()) << what;
  EXPECT_EQ(std::memcmp(sixteen.raw_data(), rounded.raw_data(), rounded.nbytes()), 0)
      << what << " (" << dtype_name(sixteen.dtype()) << "): not the f32 values rounded to nearest even";
}

// Relative error bound of one rounding to the format (half an ulp: 2^-8 bf16, 2^-11 f16) plus
// the f32 op's own few-ulp error, with a small absolute floor near zero.
double rounding_tolerance(DType format) { return format == DType::bf16 ? std::ldexp(1.0, -8) : std::ldexp(1.0, -11); }

class SixteenBitOutputs : public ::testing::TestWithParam<DType> {};

TEST_P(SixteenBitOutputs, NormsRoundTheF32ValuesOnce) {
  const DType format = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t N = 37, C = 96;
  Tensor x = testing::random_tensor({N, C}, seed, 0, -3.0f, 3.0f), w = testing::random_tensor({C}, seed, 1);
  Tensor b = testing::random_tensor({C}, seed, 2);
  Tensor wide = Tensor::empty({N, C}), mean = Tensor::empty({N}), rstd = Tensor::empty({N});
  layernorm_forward(LayernormArgs{}, x, w, b, wide, mean, rstd);
  Tensor out = Tensor::empty({N, C}, format), mean16 = Tensor::empty({N}), rstd16 = Tensor::empty({N});
  layernorm_forward(LayernormArgs{}, x, w, b, out, mean16, rstd16);
  expect_rounded_from(out, wide, "layernorm out");
  EXPECT_EQ(to_f64(mean16), to_f64(mean));
  EXPECT_EQ(to_f64(rstd16), to_f64(rstd));
  // float64: (x - mean) / sqrt(var + eps) * w + b.
  std::vector<double> xv = to_f64(x), wv = to_f64(w), bv = to_f64(b), expected(N * C);
  for (std::int64_t n = 0; n < N; ++n) {
    double m = 0, v = 0;
    for (std::int64_t c = 0; c < C; ++c) m += xv[n * C + c] / C;
    for (std::int64_t c = 0; c < C; ++c) v += (xv[n * C + c] - m) * (xv[n * C + c] - m) / C;
    for (std::int64_t c = 0; c < C; ++c)
      expected[n * C + c] = (xv[n * C + c] - m) / std::sqrt(v + 1e-5) * wv[c] + bv[c];
  }
  testing::expect_close(out, expected, 1e-6, rounding_tolerance(format), "layernorm 16-bit out vs float64");

  Tensor rms_wide = Tensor::empty({N, C}), rms_out = Tensor::empty({N, C}, format), rms_rstd = Tensor::empty({N});
  rmsnorm_forward(RmsnormArgs{}, x, w, rms_wide, rms_rstd);
  rmsnorm_forward(RmsnormArgs{}, x, w, rms_out, rstd16);
  expect_rounded_from(rms_out, rms_wide, "rmsnorm out");
  EXPECT_EQ(to_f64(rstd16), to_f64(rms_rstd));
}

TEST_P(SixteenBitOutputs, ActivationsRoundTheF32ValuesOnce) {
  const DType format = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const Shape shape = {3, 5, 67};  // not a multiple of any vector width
  Tensor x = testing::random_tensor(shape, seed, 0, -4.0f, 4.0f), up = testing::random_tensor(shape, seed, 1);
  Tensor wide = Tensor::empty(shape), out = Tensor::empty(shape, format);
  gelu_forward(GeluArgs{}, x, wide);
  gelu_forward(GeluArgs{}, x, out);
  expect_rounded_from(out, wide, "gelu out");
  std::vector<double> xv = to_f64(x), uv = to_f64(up), gelu(xv.size()), swiglu(xv.size());
  for (std::size_t i = 0; i < xv.size(); ++i) {
    const double v = xv[i];
    gelu[i] = 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v)));
    swiglu[i] = v / (1.0 + std::exp(-v)) * uv[i];
  }
  testing::expect_close(out, gelu, 1e-6, rounding_tolerance(format), "gelu 16-bit out vs float64");

  swiglu_forward(SwigluArgs{}, x, up, wide);
  swiglu_forward(SwigluArgs{}, x, up, out);
  expect_rounded_from(out, wide, "swiglu out");
  testing::expect_close(out, swiglu, 1e-6, rounding_tolerance(format), "swiglu 16-bit out vs float64");
}

// SwiGLU's gate and up kept in the format: read widened exactly (the f32 op on the widened values,
// rounded once), backward into gradients of the format; f32 gradients from them are refused.
TEST_P(SixteenBitOutputs, SwigluReadsSixteenBitGateAndUp) {
  const DType format = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t n = 777;
  const Tensor gate = testing::random_tensor({n}, seed, 0).to(format),
               up = testing::random_tensor({n}, seed, 1).to(format);
  const Tensor wide_gate = gate.to(DType::f32), wide_up = up.to(DType::f32),
               grad = testing::random_tensor({n}, seed, 2);
  Tensor wide = Tensor::empty({n}), out = Tensor::empty({n}, format);
  swiglu_forward(SwigluArgs{}, wide_gate, wide_up, wide);
  swiglu_forward(SwigluArgs{}, gate, up, out);
  expect_rounded_from(out, wide, "swiglu out from 16-bit gate and up");
  Tensor gg = Tensor::empty({n}), gu = Tensor::empty({n}), gg16 = Tensor::empty({n}, format),
         gu16 = Tensor::empty({n}, format);
  swiglu_backward(SwigluArgs{}, wide_gate, wide_up, grad, gg, gu);
  swiglu_backward(SwigluArgs{}, gate, up, grad, gg16, gu16);
  expect_rounded_from(gg16, gg, "swiglu grad_gate from 16-bit gate and up");
  expect_rounded_from(gu16, gu, "swiglu grad_up from 16-bit gate and up");
  expect_error_naming([&] { swiglu_backward(SwigluArgs{}, gate, up, grad, gg, gu); },
                      {"swiglu_backward", "16-bit 'gate'", "'grad_gate'"});
  expect_error_naming([&] { swiglu_forward(SwigluArgs{}, gate, wide_up, out); }, {"swiglu_forward", "up", "dtype"});
}

TEST_P(SixteenBitOutputs, WrongOutputsAreRefusedByName) {
  const DType format = GetParam();
  Tensor x = Tensor::zeros({4, 8}), w = Tensor::full({8}, 1.0), none;
  Tensor ints = Tensor::zeros({4, 8}, DType::i32), short_out = Tensor::zeros({4, 7}, format);
  expect_error_naming([&] { layernorm_forward(LayernormArgs{}, x, w, none, ints, none, none); },
                      {"layernorm_forward", "'out'", "i32", "f32, bf16 or f16"});
  expect_error_naming([&] { rmsnorm_forward(RmsnormArgs{}, x, w, short_out, none); },
                      {"rmsnorm_forward", "out", "[4, 7]", "[4, 8]"});
  expect_error_naming([&] { gelu_forward(GeluArgs{}, x, ints); }, {"gelu_forward", "'out'", "i32"});
  expect_error_naming([&] { swiglu_forward(SwigluArgs{}, x, x, short_out); }, {"swiglu_forward", "out", "[4, 7]"});
  Tensor sixteen_in = Tensor::zeros({4, 8}, format);  // a 16-bit GELU input gives its own format only
  expect_error_naming([&] { gelu_forward(GeluArgs{}, sixteen_in, x); }, {"gelu_forward", "'out'", "its format"});
  Tensor grad = Tensor::zeros({4, 8});
  expect_error_naming([&] { gelu_backward(GeluArgs{}, sixteen_in, grad, grad); }, {"gelu_backward", "grad_x"});
  Tensor w16 = Tensor::zeros({8, 8}, format), pre = Tensor::zeros({4, 8});
  expect_error_naming([&] { linear_gelu_forward(sixteen_in, w16, Tensor(), sixteen_in, pre); },
                      {"linear_gelu_forward", "pre_activation needs y of its format"});
  expect_error_naming([&] { linear_dgelu_backward(sixteen_in, w16, sixteen_in, pre, none); },
                      {"linear_dgelu_backward", "pre_activation"});
}

double gelu64(double v) { return 0.5 * v * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v))); }
double gelu_derivative64(double v) {
  const double u = std::sqrt(2.0 / M_PI) * (v + 0.044715 * v * v * v), t = std::tanh(u);
  return 0.5 * (1.0 + t) + 0.5 * v * (1.0 - t * t) * std::sqrt(2.0 / M_PI) * (1.0 + 3.0 * 0.044715 * v * v);
}

// Mixed precision keeps a GELU MLP's pre-activation in the format (as PyTorch's autocast keeps a
// linear layer's output): the f32 GEMM + bias output rounded once, bit for bit, and y the GELU of
// that rounded value rounded once — within half an ulp of a float64 GELU of the kept value.
TEST_P(SixteenBitOutputs, FusedLinearGeluKeepsItsPreActivationInTheFormat) {
  const DType format = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t N = 9, K = 24, F = 40;
  Tensor x = testing::random_tensor({N, K}, seed, 0).to(format), w = testing::random_tensor({F, K}, seed, 1).to(format);
  Tensor b = testing::random_tensor({F}, seed, 2);
  Tensor pre = Tensor::empty({N, F}), y = Tensor::empty({N, F});
  Tensor pre16 = Tensor::empty({N, F}, format), y16 = Tensor::empty({N, F}, format);
  linear_gelu_forward(x, w, b, pre, y);
  // With an f32 pre-activation beside a 16-bit y: the f32 GEMM output as it is, y the GELU rounded.
  Tensor wide_pre = Tensor::empty({N, F}), y_of_wide = Tensor::empty({N, F}, format);
  linear_gelu_forward(x, w, b, wide_pre, y_of_wide);
  EXPECT_EQ(to_f64(wide_pre), to_f64(pre)) << "an f32 pre-activation stays the f32 GEMM output";
  expect_rounded_from(y_of_wide, y, "linear_gelu_forward y with an f32 pre-activation");
  linear_gelu_forward(x, w, b, pre16, y16);
  expect_rounded_from(pre16, pre, "linear_gelu_forward pre_activation");
  Tensor y_of_kept = Tensor::empty({N, F});
  gelu_forward(GeluArgs{}, pre16.to(DType::f32), y_of_kept);
  expect_rounded_from(y16, y_of_kept, "linear_gelu_forward y (the GELU of the kept pre-activation)");
  const std::vector<double> kept = to_f64(pre16), got = to_f64(y16);
  for (std::size_t i = 0; i < kept.size(); ++i) {
    const double want = gelu64(kept[i]);
    EXPECT_LE(std::abs(got[i] - want), rounding_tolerance(format) * std::abs(want) * 1.01 + 1e-6) << "y[" << i << "]";
  }
  Tensor again = Tensor::empty({N, F}, format);  // recomputing the GELU from the kept value gives y again
  gelu_forward(GeluArgs{}, pre16, again);
  EXPECT_EQ(to_f64(again), got);
}

// The backward reads the kept pre-activation widened: grad_pre = (grad_y W) * gelu'(pre) rounded
// once into the format (against float64), the bias gradient the column sums of those values.
TEST_P(SixteenBitOutputs, LinearDgeluReadsAKeptPreActivation) {
  const DType format = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t N = 11, n = 24, F = 40;
  const Tensor grad_y = testing::random_tensor({N, n}, seed, 0).to(format);
  const Tensor w = testing::random_tensor({n, F}, seed, 1).to(format);
  const Tensor pre16 = testing::random_tensor({N, F}, seed, 2, -3.0f, 3.0f).to(format);
  Tensor grad_pre = Tensor::empty({N, F}, format), grad_bias = testing::random_tensor({F}, seed, 3);
  const std::vector<double> bias_before = to_f64(grad_bias);
  linear_dgelu_backward(grad_y, w, pre16, grad_pre, grad_bias);
  const std::vector<double> gy = to_f64(grad_y), wv = to_f64(w), p = to_f64(pre16), got = to_f64(grad_pre);
  const std::vector<double> bias_got = to_f64(grad_bias);
  for (std::int64_t f = 0; f < F; ++f) {
    double column = 0.0;
    for (std::int64_t r = 0; r < N; ++r) {
      double product = 0.0;
      for (std::int64_t j = 0; j < n; ++j) product += gy[r * n + j] * wv[j * F + f];
      const double want = product * gelu_derivative64(p[r * F + f]);
      EXPECT_LE(std::abs(got[r * F + f] - want), rounding_tolerance(format) * std::abs(want) * 1.01 + 1e-5)
          << "grad_pre[" << r << ", " << f << "]";
      column += got[r * F + f];
    }
    EXPECT_NEAR(bias_got[f] - bias_before[f], column, 1e-5 * (1.0 + std::abs(column))) << "grad_bias[" << f << "]";
  }
}

// Attention with 16-bit products writes values of the format: its out may be a tensor of the format
// (here the heads view of (B, T, H D) rows, as the model holds it), equal to the f32 out, and the
// backward reading it gives the f32 out's gradients bit for bit.
TEST_P(SixteenBitOutputs, AttentionOutputInTheOperandsFormat) {
  const DType format = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t B = 2, H = 2, T = 9, D = 64;
  const Tensor q = testing::random_tensor({B, H, T, D}, seed, 0), k = testing::random_tensor({B, H, T, D}, seed, 1);
  const Tensor v = testing::random_tensor({B, H, T, D}, seed, 2), dy = testing::random_tensor({B, H, T, D}, seed, 3);
  AttentionArgs args;
  args.operands = format;
  Tensor wide = Tensor::empty({B, H, T, D}), lse = Tensor::empty({B, H, T}), lse16 = Tensor::empty({B, H, T});
  attention_forward(args, q, k, v, wide, lse);
  Tensor rows = Tensor::empty({B, T, H * D}, format);
  Tensor out = rows.view({B, T, H, D}).permute({0, 2, 1, 3});  // heads of rows, strided
  attention_forward(args, q, k, v, out, lse16);
  expect_rounded_from(out.contiguous(), wide, "attention out");
  EXPECT_EQ(to_f64(wide.to(format)), to_f64(wide)) << "the f32 out already holds values of the format";
  EXPECT_EQ(to_f64(lse16), to_f64(lse));
  Tensor gq = Tensor::empty(q.shape()), gk = Tensor::empty(k.shape()), gv = Tensor::empty(v.shape());
  Tensor gq16 = Tensor::empty(q.shape()), gk16 = Tensor::empty(k.shape()), gv16 = Tensor::empty(v.shape());
  attention_backward(args, q, k, v, wide, lse, dy, gq, gk, gv);
  attention_backward(args, q, k, v, out, lse16, dy, gq16, gk16, gv16);
  EXPECT_EQ(to_f64(gq16), to_f64(gq));
  EXPECT_EQ(to_f64(gk16), to_f64(gk));
  EXPECT_EQ(to_f64(gv16), to_f64(gv));
  AttentionArgs wide_products;  // f32 products write f32 only
  Tensor narrow = Tensor::empty({B, H, T, D}, format);
  expect_error_naming([&] { attention_forward(wide_products, q, k, v, narrow, lse); },
                      {"attention_forward", "'out'", dtype_name(format).data(), "must be f32"});
}

// RoPE's forward into the format (the rotated q, k kept for 16-bit attention), and the attention
// reading q, k in the format: the same results as from their f32 values, which it rounds itself.
TEST_P(SixteenBitOutputs, RotatedQueriesAndKeysInTheOperandsFormat) {
  const DType format = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t B = 2, T = 7, H = 2, D = 64;
  const Tensor x = testing::random_tensor({B, T, H, D}, seed, 0);
  Tensor wide = Tensor::empty({B, T, H, D}), narrow = Tensor::empty({B, T, H, D}, format);
  rope_forward(RopeArgs{}, x, wide);
  rope_forward(RopeArgs{}, x, narrow);
  expect_rounded_from(narrow, wide, "rope out");
  Tensor ints = Tensor::zeros({B, T, H, D}, DType::i32);
  expect_error_naming([&] { rope_backward(RopeArgs{}, x, ints); }, {"rope_backward", "grad_x", "f32, bf16 or f16"});

  const Tensor q32 = testing::random_tensor({B, T, H, D}, seed, 1), k32 = testing::random_tensor({B, T, H, D}, seed, 2);
  const Tensor v = testing::random_tensor({B, T, H, D}, seed, 3).permute({0, 2, 1, 3});
  const Tensor q16 = q32.to(format), k16 = k32.to(format);
  AttentionArgs args;
  args.operands = format;
  Tensor out = Tensor::empty({B, H, T, D}), out16 = Tensor::empty({B, H, T, D}), lse = Tensor::empty({B, H, T});
  Tensor lse16 = Tensor::empty({B, H, T});
  attention_forward(args, q32.permute({0, 2, 1, 3}), k32.permute({0, 2, 1, 3}), v, out, lse);
  attention_forward(args, q16.permute({0, 2, 1, 3}), k16.permute({0, 2, 1, 3}), v, out16, lse16);
  EXPECT_EQ(to_f64(out16), to_f64(out));
  EXPECT_EQ(to_f64(lse16), to_f64(lse));
  AttentionArgs wide_products;
  expect_error_naming(
      [&] {
        attention_forward(wide_products, q16.permute({0, 2, 1, 3}), k32.permute({0, 2, 1, 3}), v, out, lse);
      },
      {"attention_forward", "'q'", "must be f32"});
}

INSTANTIATE_TEST_SUITE_P(Formats, SixteenBitOutputs, ::testing::Values(DType::bf16, DType::f16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

}  // namespace
}  // namespace myriad
