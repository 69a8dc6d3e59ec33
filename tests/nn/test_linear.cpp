// nn::linear_forward / linear_backward with 16-bit GEMM operands (mixed precision) against a
// float64 reference computed from the operands rounded to that format: the forward's y = round(x)
// round(W)^T + b, the backward's dx = round(dy) round(W), dW += round(dy)^T round(x), db += sum dy
// (the bias gradient from the f32 dy); and with f32 operands the plain float64 linear layer.
#include <gtest/gtest.h>

#include <vector>

#include "myriad/core/half.h"
#include "myriad/nn/linear.h"
#include "reference.h"

namespace myriad::nn {
namespace {

// The values of `t` (f32) rounded to `format`, as float64.
std::vector<double> rounded(const Tensor& t, DType format) {
  std::vector<double> out = testing::to_f64(t);
  for (double& v : out) {
    const auto f = static_cast<float>(v);
    if (format == DType::bf16) v = bf16_to_float(float_to_bf16(f));
    if (format == DType::f16) v = f16_to_float(float_to_f16(f));
  }
  return out;
}

TEST(LinearOperands, SixteenBitOperandsEqualTheRoundedFloat64LinearLayer) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t N = 13, K = 24, M = 10;
  for (DType format : {DType::f32, DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(format));
    Tensor x = testing::random_tensor({N, K}, seed, 0, -3.0f, 3.0f);
    Tensor w = testing::random_tensor({M, K}, seed, 1), b = testing::random_tensor({M}, seed, 2);
    Tensor dy = testing::random_tensor({N, M}, seed, 3);
    const std::vector<double> xr = rounded(x, format), wr = rounded(w, format), dyr = rounded(dy, format);
    const std::vector<double> bv = testing::to_f64(b), dyv = testing::to_f64(dy);
    Tensor y = Tensor::empty({N, M});
    linear_forward(x, w, b, y, format);
    std::vector<double> want_y(N * M), want_dx(N * K, 0.0), want_dw(M * K, 0.0), want_db(M, 0.0);
    for (std::int64_t n = 0; n < N; ++n) {
      for (std::int64_t m = 0; m < M; ++m) {
        double sum = bv[m];
        for (std::int64_t k = 0; k < K; ++k) sum += xr[n * K + k] * wr[m * K + k];
        want_y[n * M + m] = sum;
        want_db[m] += dyv[n * M + m];
        for (std::int64_t k = 0; k < K; ++k) {
          want_dx[n * K + k] += dyr[n * M + m] * wr[m * K + k];
          want_dw[m * K + k] += dyr[n * M + m] * xr[n * K + k];
        }
      }
    }
    testing::expect_close(y, want_y, 1e-5, 1e-5, "y");
    Tensor dx = Tensor::empty({N, K}), dw = Tensor::zeros({M, K}), db = Tensor::zeros({M});
    linear_backward(x, w, dy, dx, false, dw, db, format);
    testing::expect_close(dx, want_dx, 1e-5, 1e-5, "dx");
    testing::expect_close(dw, want_dw, 1e-5, 1e-5, "dW (+=)");
    testing::expect_close(db, want_db, 1e-5, 1e-5, "db (+=)");
  }
}

}  // namespace
}  // namespace myriad::nn
