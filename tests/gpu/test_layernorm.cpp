// LayerNorm kernels (kernels/norms/layernorm.cu) against float64. Forward: out, mean, rstd.
// Backward of L = sum(out * grad_out): against central finite differences of the float64
// forward where that is affordable (N * C <= 4200), otherwise against the analytic float64
// backward (itself checked against finite differences on the small shapes). Gradient contract:
// grad_x written (starts as NaN), grad_weight / grad_bias accumulated onto random values.
// Shapes cover one row, odd C, C > 1024, C = 1, and N large enough for several row groups.
//
// Inputs: x = +-1 alternating by column + uniform [-0.5, 0.5) + 2 (a row offset, so the mean is
// far from 0 and a one-pass variance would lose digits). Every row with C >= 2 then has
// variance >= ~0.2, so rstd <= ~2.3 and f32 errors are not amplified by a near-constant row.
// Tolerances (a host emulation of the kernels' f32 arithmetic and summation order peaks at ~12%
// of each): row sums of <= 1031 f32 terms (lane-strided, then a 5-step butterfly) keep ~1e-7
// relative, so out: atol 4e-6, rtol 4e-6; mean: atol 1e-6, rtol 2e-6; rstd: rtol 4e-6.
// grad_x = rstd * (difference of O(1) terms): its absolute error scales with rstd, so atol is
// 4e-6 * max(1, max rstd) (C = 1 rows have var = 0 and rstd = 1/sqrt(eps) = 316). The parameter
// gradients sum N terms of O(1), whose rounding grows like sqrt(N): atol 2e-6 * sqrt(N), rtol 4e-6.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include "gpu_test_support.h"
#include "myriad/cuda/kernels.h"
#include "reference.h"

namespace myriad {
namespace {

using testing::DeviceArray;
using testing::expect_error_mentions;

constexpr float kEps = 1e-5f;

struct LayernormF64 {
  std::vector<double> out, mean, rstd;
};

LayernormF64 layernorm_f64(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                           std::int64_t rows, std::int64_t channels) {
  LayernormF64 r{std::vector<double>(x.size()), std::vector<double>(rows), std::vector<double>(rows)};
  for (std::int64_t n = 0; n < rows; ++n) {
    const double* xr = x.data() + n * channels;
    double mean = 0.0, var = 0.0;
    for (std::int64_t c = 0; c < channels; ++c) mean += xr[c];
    mean /= static_cast<double>(channels);
    for (std::int64_t c = 0; c < channels; ++c) var += (xr[c] - mean) * (xr[c] - mean);
    var /= static_cast<double>(channels);
    const double rstd = 1.0 / std::sqrt(var + static_cast<double>(kEps));
    for (std::int64_t c = 0; c < channels; ++c) r.out[n * channels + c] = (xr[c] - mean) * rstd * w[c] + b[c];
    r.mean[n] = mean;
    r.rstd[n] = rstd;
  }
  return r;
}

struct LayernormGradsF64 {
  std::vector<double> grad_x, grad_weight, grad_bias;
};

LayernormGradsF64 layernorm_backward_f64(const std::vector<double>& grad_out, const std::vector<double>& x,
                                         const std::vector<double>& w, std::int64_t rows, std::int64_t channels) {
  const LayernormF64 f = layernorm_f64(x, w, std::vector<double>(channels, 0.0), rows, channels);
  LayernormGradsF64 g{std::vector<double>(x.size()), std::vector<double>(channels, 0.0),
                      std::vector<double>(channels, 0.0)};
  for (std::int64_t n = 0; n < rows; ++n) {
    double mean_g = 0.0, mean_g_xhat = 0.0;
    for (std::int64_t c = 0; c < channels; ++c) {
      const std::int64_t i = n * channels + c;
      const double xhat = (x[i] - f.mean[n]) * f.rstd[n];
      mean_g += grad_out[i] * w[c];
      mean_g_xhat += grad_out[i] * w[c] * xhat;
      g.grad_weight[c] += grad_out[i] * xhat;
      g.grad_bias[c] += grad_out[i];
    }
    mean_g /= static_cast<double>(channels);
    mean_g_xhat /= static_cast<double>(channels);
    for (std::int64_t c = 0; c < channels; ++c) {
      const std::int64_t i = n * channels + c;
      const double xhat = (x[i] - f.mean[n]) * f.rstd[n];
      g.grad_x[i] = f.rstd[n] * (grad_out[i] * w[c] - mean_g - xhat * mean_g_xhat);
    }
  }
  return g;
}

std::vector<float> well_conditioned_rows(std::int64_t rows, std::int64_t channels, std::uint64_t seed) {
  std::vector<float> x = testing::random_tensor_floats(rows * channels, seed, 0, -0.5f, 0.5f);
  for (std::int64_t i = 0; i < rows * channels; ++i) x[i] += 2.0f + ((i % channels) % 2 == 0 ? -1.0f : 1.0f);
  return x;
}

std::vector<double> f64(const std::vector<float>& v) { return std::vector<double>(v.begin(), v.end()); }

std::vector<double> plus(const std::vector<float>& base, const std::vector<double>& delta) {
  std::vector<double> out(delta.size());
  for (std::size_t i = 0; i < delta.size(); ++i) out[i] = base[i] + delta[i];
  return out;
}

struct LayernormCase {
  std::int64_t rows, channels;
};

void PrintTo(const LayernormCase& c, std::ostream* os) { *os << "(N, C) = (" << c.rows << ", " << c.channels << ")"; }

std::string layernorm_case_name(const ::testing::TestParamInfo<LayernormCase>& info) {
  return "N" + std::to_string(info.param.rows) + "_C" + std::to_string(info.param.channels);
}

class LayernormKernel : public ::testing::TestWithParam<LayernormCase> {};

TEST_P(LayernormKernel, ForwardAndBackwardMatchFloat64) {
  MYRIAD_REQUIRE_GPU();
  // Variables, not structured bindings: lambdas below capture them (clang-tidy 14 cannot parse that).
  const std::int64_t rows = GetParam().rows, channels = GetParam().channels;
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  const std::vector<float> x = well_conditioned_rows(rows, channels, seed);
  const std::vector<float> w = testing::random_tensor_floats(channels, seed, 1, -1.0f, 1.0f);
  const std::vector<float> b = testing::random_tensor_floats(channels, seed, 2, -1.0f, 1.0f);
  const std::vector<float> grad_out = testing::random_tensor_floats(rows * channels, seed, 3, -1.0f, 1.0f);
  const std::vector<float> grad_w0 = testing::random_tensor_floats(channels, seed, 4, -1.0f, 1.0f);
  const std::vector<float> grad_b0 = testing::random_tensor_floats(channels, seed, 5, -1.0f, 1.0f);

  DeviceArray<float> dx(context, x), dw(context, w), db(context, b), dgo(context, grad_out);
  DeviceArray<float> dout(context, rows * channels), dmean(context, rows), drstd(context, rows);
  cuda::layernorm_forward_f32(dx.get(), dw.get(), db.get(), dout.get(), dmean.get(), drstd.get(), rows, channels, kEps,
                              context.stream());
  const LayernormF64 ref = layernorm_f64(f64(x), f64(w), f64(b), rows, channels);
  testing::expect_close(f64(dout.download()), ref.out, 4e-6, 4e-6, "layernorm out");
  testing::expect_close(f64(dmean.download()), ref.mean, 1e-6, 2e-6, "layernorm mean");
  testing::expect_close(f64(drstd.download()), ref.rstd, 0.0, 4e-6, "layernorm rstd");

  const std::int64_t scratch_floats = cuda::layernorm_backward_scratch_floats(rows, channels);
  DeviceArray<float> dgx(context, rows * channels), dgw(context, grad_w0), dgb(context, grad_b0);
  DeviceArray<float> scratch(context, scratch_floats > 0 ? scratch_floats : 1);
  cuda::layernorm_backward_f32(dgo.get(), dx.get(), dw.get(), dmean.get(), drstd.get(), dgx.get(), dgw.get(), dgb.get(),
                               scratch.get(), scratch.size(), rows, channels, context.stream());

  LayernormGradsF64 expected = layernorm_backward_f64(f64(grad_out), f64(x), f64(w), rows, channels);
  if (rows * channels <= 4200) {
    const std::vector<double> xv = f64(x), wv = f64(w), bv = f64(b), gov = f64(grad_out);
    auto loss_x = [&](const std::vector<double>& v) {
      return testing::dot(layernorm_f64(v, wv, bv, rows, channels).out, gov);
    };
    auto loss_w = [&](const std::vector<double>& v) {
      return testing::dot(layernorm_f64(xv, v, bv, rows, channels).out, gov);
    };
    auto loss_b = [&](const std::vector<double>& v) {
      return testing::dot(layernorm_f64(xv, wv, v, rows, channels).out, gov);
    };
    LayernormGradsF64 numeric{testing::numerical_gradient(loss_x, xv), testing::numerical_gradient(loss_w, wv),
                              testing::numerical_gradient(loss_b, bv)};
    // The analytic reference used for the large shapes agrees with finite differences.
    testing::expect_close(expected.grad_x, numeric.grad_x, 1e-6, 1e-6, "analytic reference grad_x");
    testing::expect_close(expected.grad_weight, numeric.grad_weight, 1e-6, 1e-6, "analytic reference grad_weight");
    testing::expect_close(expected.grad_bias, numeric.grad_bias, 1e-6, 1e-6, "analytic reference grad_bias");
    expected = numeric;
  }
  const double max_rstd = *std::max_element(ref.rstd.begin(), ref.rstd.end());
  const double param_atol = 2e-6 * std::sqrt(static_cast<double>(rows));
  testing::expect_close(f64(dgx.download()), expected.grad_x, 4e-6 * std::max(1.0, max_rstd), 4e-6,
                        "layernorm grad_x (written)");
  testing::expect_close(f64(dgw.download()), plus(grad_w0, expected.grad_weight), param_atol, 4e-6,
                        "layernorm grad_weight (accumulated)");
  testing::expect_close(f64(dgb.download()), plus(grad_b0, expected.grad_bias), param_atol, 4e-6,
                        "layernorm grad_bias (accumulated)");
}

INSTANTIATE_TEST_SUITE_P(Shapes, LayernormKernel,
                         ::testing::Values(LayernormCase{1, 7}, LayernormCase{6, 1}, LayernormCase{5, 33},
                                           LayernormCase{3, 64}, LayernormCase{4, 1031}, LayernormCase{17, 768},
                                           LayernormCase{300, 40}, LayernormCase{1000, 96}, LayernormCase{40000, 3}),
                         layernorm_case_name);

TEST(LayernormKernelContract, OptionalOutputsAndDeterminism) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  const std::int64_t rows = 3000, channels = 70;  // 12 row groups: the scratch path
  const std::vector<float> x = well_conditioned_rows(rows, channels, seed);
  const std::vector<float> w = testing::random_tensor_floats(channels, seed, 1, -1.0f, 1.0f);
  const std::vector<float> grad_out = testing::random_tensor_floats(rows * channels, seed, 3, -1.0f, 1.0f);
  const std::vector<float> zeros(channels, 0.0f);
  DeviceArray<float> dx(context, x), dw(context, w), dgo(context, grad_out);
  DeviceArray<float> dout(context, rows * channels), dmean(context, rows), drstd(context, rows);
  DeviceArray<float> dout_bare(context, rows * channels);
  cuda::layernorm_forward_f32(dx.get(), dw.get(), nullptr, dout.get(), dmean.get(), drstd.get(), rows, channels, kEps,
                              context.stream());
  cuda::layernorm_forward_f32(dx.get(), dw.get(), nullptr, dout_bare.get(), nullptr, nullptr, rows, channels, kEps,
                              context.stream());
  EXPECT_EQ(dout_bare.download(), dout.download()) << "saving mean/rstd must not change out";

  const std::int64_t scratch_floats = cuda::layernorm_backward_scratch_floats(rows, channels);
  ASSERT_EQ(scratch_floats, 2 * 12 * channels);
  DeviceArray<float> scratch(context, scratch_floats);
  auto backward = [&](float* gx, float* gw, float* gb) {
    cuda::layernorm_backward_f32(dgo.get(), dx.get(), dw.get(), dmean.get(), drstd.get(), gx, gw, gb, scratch.get(),
                                 scratch_floats, rows, channels, context.stream());
  };
  DeviceArray<float> gx1(context, rows * channels), gw1(context, zeros), gb1(context, zeros);
  DeviceArray<float> gx2(context, rows * channels), gw2(context, zeros), gb2(context, zeros);
  DeviceArray<float> gx_only(context, rows * channels), gw_only(context, zeros), gb_only(context, zeros);
  backward(gx1.get(), gw1.get(), gb1.get());
  backward(gx2.get(), gw2.get(), gb2.get());
  backward(gx_only.get(), nullptr, nullptr);
  backward(nullptr, gw_only.get(), nullptr);
  backward(nullptr, nullptr, gb_only.get());
  EXPECT_EQ(gx1.download(), gx2.download()) << "grad_x differs between identical runs";
  EXPECT_EQ(gw1.download(), gw2.download()) << "grad_weight differs between identical runs";
  EXPECT_EQ(gb1.download(), gb2.download()) << "grad_bias differs between identical runs";
  EXPECT_EQ(gx_only.download(), gx1.download());
  EXPECT_EQ(gw_only.download(), gw1.download());
  EXPECT_EQ(gb_only.download(), gb1.download());
}

// ---- validation: fails before anything reaches the GPU, so these run without a device ------

TEST(LayernormKernelValidation, BadArgumentsThrowNamingLauncherAndArgument) {
  auto* x = reinterpret_cast<float*>(0x100000);
  auto* w = reinterpret_cast<float*>(0x200000);
  auto* out = reinterpret_cast<float*>(0x300000);
  auto* stats = reinterpret_cast<float*>(0x400000);
  expect_error_mentions([&] { cuda::layernorm_forward_f32(x, w, nullptr, out, nullptr, nullptr, 3, 0, kEps, nullptr); },
                        {"layernorm_forward_f32", "channels must be > 0"});
  expect_error_mentions(
      [&] { cuda::layernorm_forward_f32(x, w, nullptr, out, nullptr, nullptr, -2, 4, kEps, nullptr); },
      {"layernorm_forward_f32", "rows must be >= 0", "-2"});
  expect_error_mentions(
      [&] { cuda::layernorm_forward_f32(x, nullptr, nullptr, out, nullptr, nullptr, 3, 4, kEps, nullptr); },
      {"layernorm_forward_f32", "weight is null"});
  expect_error_mentions(
      [&] { cuda::layernorm_forward_f32(x, w, nullptr, x + 4, nullptr, nullptr, 3, 4, kEps, nullptr); },
      {"layernorm_forward_f32", "out", "overlaps x"});
  expect_error_mentions(
      [&] { cuda::layernorm_forward_f32(x, w, nullptr, out, nullptr, nullptr, 3, 4, -1.0f, nullptr); },
      {"layernorm_forward_f32", "eps"});
  // 1000 rows need 4 row groups: 2 * 4 * 8 floats of scratch.
  ASSERT_EQ(cuda::layernorm_backward_scratch_floats(1000, 8), 64);
  expect_error_mentions(
      [&] {
        cuda::layernorm_backward_f32(x, x, w, stats, stats, nullptr, out, nullptr, out + 8, 63, 1000, 8, nullptr);
      },
      {"layernorm_backward_f32", "scratch holds 63", "(1000, 8)", "needs 64"});
  expect_error_mentions(
      [&] { cuda::layernorm_backward_f32(x, x, w, nullptr, stats, out, nullptr, nullptr, nullptr, 0, 4, 8, nullptr); },
      {"layernorm_backward_f32", "mean is null"});
  expect_error_mentions(
      [&] { cuda::layernorm_backward_f32(x, x, w, stats, stats, x + 1, nullptr, nullptr, nullptr, 0, 4, 8, nullptr); },
      {"layernorm_backward_f32", "grad_x", "overlaps"});
  EXPECT_EQ(cuda::layernorm_backward_scratch_floats(256, 8), 0);  // one group: no scratch
  // Nothing to compute: no checks of absent pointers, nothing enqueued.
  const float* no_floats = nullptr;
  EXPECT_NO_THROW(cuda::layernorm_forward_f32(no_floats, nullptr, nullptr, static_cast<float*>(nullptr), nullptr,
                                              nullptr, 0, 4, kEps, nullptr));
  EXPECT_NO_THROW(cuda::layernorm_backward_f32(nullptr, no_floats, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr,
                                               nullptr, 0, 4, 8, nullptr));
}

}  // namespace
}  // namespace myriad
