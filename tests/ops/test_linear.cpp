// linear_forward (x W^T + b, optional GELU) against float64, with and without bias and GELU, for
// a batched x; argument errors name the op and the tensor.
#include <gtest/gtest.h>

#include <cmath>

#include "myriad/ops/linear.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using namespace testing;

double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

TEST(Linear, MatchesFloat64WithAndWithoutBiasAndGelu) {
  const std::uint64_t seed = fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t B = 2, T = 3, K = 16, N = 5;
  const Tensor x = random_tensor({B, T, K}, seed, 0), w = random_tensor({N, K}, seed, 1),
               b = random_tensor({N}, seed, 2);
  const std::vector<double> vx = to_f64(x), vw = to_f64(w), vb = to_f64(b);
  for (bool with_bias : {false, true}) {
    for (bool with_gelu : {false, true}) {
      SCOPED_TRACE(std::string(with_bias ? "bias" : "no bias") + (with_gelu ? " gelu" : ""));
      std::vector<double> expected;
      for (std::int64_t r = 0; r < B * T; ++r) {
        for (std::int64_t n = 0; n < N; ++n) {
          double sum = with_bias ? vb[n] : 0.0;
          for (std::int64_t k = 0; k < K; ++k) sum += vx[r * K + k] * vw[n * K + k];
          expected.push_back(with_gelu ? gelu(sum) : sum);
        }
      }
      Tensor y = Tensor::empty({B, T, N});
      linear_forward(LinearArgs{.gelu = with_gelu}, x, w, with_bias ? b : Tensor(), y);
      expect_close(y, expected, 1e-5, 1e-5, "y");
    }
  }
}

TEST(Linear, ArgumentErrorsNameOpAndTensor) {
  Tensor x = Tensor::zeros({4, 3}), w = Tensor::zeros({2, 5}), y = Tensor::zeros({4, 2});
  expect_error_naming([&] { linear_forward(LinearArgs{}, x, w, Tensor(), y); }, {"linear_forward", "in-features 5"});
  Tensor w2 = Tensor::zeros({2, 3}), bad_bias = Tensor::zeros({3});
  expect_error_naming([&] { linear_forward(LinearArgs{}, x, w2, bad_bias, y); }, {"linear_forward", "'bias'"});
}

}  // namespace
}  // namespace myriad
