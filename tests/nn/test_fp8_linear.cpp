// The FP8 linear layer against float64: forward y, backward dx (written and accumulated), dW
// (accumulated) and db equal float64 sums over the operands quantised by the definition —
// round_to_fp8(t * scale) / scale with the layer's scales (E4M3 input and weight, E5M2 output
// gradient) — and every quantisation records its tensor's amax in the layer's slots.
#include <gtest/gtest.h>

#include <cmath>

#include "myriad/core/fp8.h"
#include "myriad/nn/fp8_linear.h"
#include "reference.h"

namespace myriad::nn {
namespace {

using namespace myriad::testing;

// t quantised as the layer does, in float64.
std::vector<double> dequantized(const Tensor& t, float scale, const Fp8Format& format) {
  std::vector<double> out = to_f64(t);
  for (double& v : out) v = round_to_fp8(static_cast<float>(v) * scale, format) / static_cast<double>(scale);
  return out;
}

double max_abs(const Tensor& t) {
  double m = 0.0;
  for (double v : to_f64(t)) m = std::max(m, std::fabs(v));
  return m;
}

TEST(Fp8Linear, ForwardAndBackwardEqualFloat64OnTheQuantisedOperands) {
  const std::uint64_t seed = fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t B = 3, T = 5, K = 24, M = 16, N = B * T;
  const Tensor x = random_tensor({B, T, K}, seed, 0, -2.0f, 2.0f);
  const Tensor w = random_tensor({M, K}, seed, 1, -0.3f, 0.3f);
  const Tensor bias = random_tensor({M}, seed, 2);
  const Tensor dy = random_tensor({B, T, M}, seed, 3, -1e-3f, 1e-3f);
  Fp8Scaling scaling(Fp8Recipe{}, 2, {});
  const std::int64_t linear = 1;
  Tensor y = Tensor::empty({B, T, M});
  fp8_linear_forward(x, w, bias, y, scaling, linear);
  const float sx = scaling.scale(linear, Fp8Role::input, x), sw = scaling.scale(linear, Fp8Role::weight, w);
  EXPECT_EQ(sx, 128.0f) << "just in time from max |x| < 2";
  const std::vector<double> xq = dequantized(x, sx, kE4M3), wq = dequantized(w, sw, kE4M3), b = to_f64(bias);
  std::vector<double> want_y(static_cast<std::size_t>(N * M));
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t m = 0; m < M; ++m) {
      double sum = b[m];
      for (std::int64_t k = 0; k < K; ++k) sum += xq[n * K + k] * wq[m * K + k];
      want_y[n * M + m] = sum;
    }
  }
  expect_close(y, want_y, 1e-5, 1e-5, "y");

  Tensor dx = Tensor::full({B, T, K}, 0.5), dw = Tensor::full({M, K}, 0.25), db = Tensor::zeros({M});
  fp8_linear_backward(x, w, dy, dx, true, dw, db, scaling, linear);
  const float sg = scaling.scale(linear, Fp8Role::grad, dy);
  EXPECT_GT(sg, 1e7f) << "gradients of 1e-3 are scaled up into E5M2's range";
  const std::vector<double> gq = dequantized(dy, sg, kE5M2), g = to_f64(dy);
  std::vector<double> want_dx(static_cast<std::size_t>(N * K)), want_dw(static_cast<std::size_t>(M * K));
  std::vector<double> want_db(static_cast<std::size_t>(M), 0.0);
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t k = 0; k < K; ++k) {
      double sum = 0.5;
      for (std::int64_t m = 0; m < M; ++m) sum += gq[n * M + m] * wq[m * K + k];
      want_dx[n * K + k] = sum;
    }
  }
  for (std::int64_t m = 0; m < M; ++m) {
    for (std::int64_t k = 0; k < K; ++k) {
      double sum = 0.25;
      for (std::int64_t n = 0; n < N; ++n) sum += gq[n * M + m] * xq[n * K + k];
      want_dw[m * K + k] = sum;
    }
    for (std::int64_t n = 0; n < N; ++n) want_db[m] += g[n * M + m];
  }
  expect_close(dx, want_dx, 1e-6, 1e-5, "dx (accumulated)");
  expect_close(dw, want_dw, 1e-6, 1e-5, "dW (accumulated)");
  expect_close(db, want_db, 1e-9, 1e-5, "db");
  Tensor dx_only = Tensor::full({B, T, K}, 9.0), no_db;
  Tensor dw2 = Tensor::zeros({M, K});
  fp8_linear_backward(x, w, dy, dx_only, false, dw2, no_db, scaling, linear);
  for (double& v : want_dx) v -= 0.5;
  expect_close(dx_only, want_dx, 1e-6, 1e-5, "dx (written)");

  EXPECT_EQ(static_cast<double>(scaling.amax_slot(linear, Fp8Role::input).data<float>()[0]), max_abs(x));
  EXPECT_EQ(static_cast<double>(scaling.amax_slot(linear, Fp8Role::weight).data<float>()[0]), max_abs(w));
  EXPECT_EQ(static_cast<double>(scaling.amax_slot(linear, Fp8Role::grad).data<float>()[0]), max_abs(dy));
  EXPECT_EQ(scaling.amax_slot(0, Fp8Role::input).data<float>()[0], 0.0f) << "another layer's slot is untouched";
}

}  // namespace
}  // namespace myriad::nn
