// linear_forward (x W^T + b, optional GELU) against float64, with and without bias and GELU, for
// a batched x; the GELU MLP's fused pair (linear_gelu_forward, linear_dgelu_backward) against
// float64 and finite differences, and bit for bit against the ops one after another; argument
// errors name the op and the tensor.
#include <gtest/gtest.h>

#include <cmath>

#include "myriad/ops/activations.h"
#include "myriad/ops/bias_add.h"
#include "myriad/ops/linear.h"
#include "myriad/ops/matmul.h"
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

// The GELU MLP's fused pair. Forward: pre_activation = x W^T + b and y = gelu(pre) against
// float64, with f32 and bf16 operands (the reference on the rounded values), with and without
// bias. Backward: grad_pre against central differences in float64 of
// L(pre) = sum_{r,n} G[r,n] sum_f gelu(pre[r,f]) W2[n,f], and grad_bias += its column sums.
TEST(LinearGelu, ForwardKeepsTheGeluInputAndWritesItsGelu) {
  const std::uint64_t seed = fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t B = 2, T = 3, K = 16, F = 24;
  for (DType operands : {DType::f32, DType::bf16}) {
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(operands)) + (with_bias ? " bias" : " no bias"));
      const Tensor x = random_tensor({B, T, K}, seed, 0).to(operands), w = random_tensor({F, K}, seed, 1).to(operands);
      const Tensor b = with_bias ? random_tensor({F}, seed, 2) : Tensor();
      const std::vector<double> vx = to_f64(x), vw = to_f64(w), vb = with_bias ? to_f64(b) : std::vector<double>(F, 0);
      std::vector<double> want_pre, want_y;
      for (std::int64_t r = 0; r < B * T; ++r) {
        for (std::int64_t f = 0; f < F; ++f) {
          double sum = vb[f];
          for (std::int64_t k = 0; k < K; ++k) sum += vx[r * K + k] * vw[f * K + k];
          want_pre.push_back(sum);
          want_y.push_back(gelu(sum));
        }
      }
      Tensor pre = Tensor::full({B, T, F}, 7.0), y = Tensor::full({B, T, F}, 7.0);
      linear_gelu_forward(x, w, b, pre, y);
      expect_close(pre, want_pre, 1e-5, 1e-5, "pre_activation");
      expect_close(y, want_y, 1e-5, 1e-5, "y");
    }
  }
}

TEST(LinearGelu, DgeluBackwardIsTheGradientThroughTheNextLayerAndTheGelu) {
  const std::uint64_t seed = fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t R = 5, F = 8, N = 6;
  const Tensor pre = random_tensor({R, F}, seed, 0, -3.0f, 3.0f), w2 = random_tensor({N, F}, seed, 1);
  const Tensor g = random_tensor({R, N}, seed, 2);
  const std::vector<double> vw = to_f64(w2), vg = to_f64(g);
  auto loss = [&](const std::vector<double>& p) {
    double total = 0.0;
    for (std::int64_t r = 0; r < R; ++r) {
      for (std::int64_t n = 0; n < N; ++n) {
        double y = 0.0;
        for (std::int64_t f = 0; f < F; ++f) y += gelu(p[r * F + f]) * vw[n * F + f];
        total += vg[r * N + n] * y;
      }
    }
    return total;
  };
  const std::vector<double> want = numerical_gradient(loss, to_f64(pre));
  std::vector<double> want_bias(F, 0.5);
  for (std::int64_t r = 0; r < R; ++r)
    for (std::int64_t f = 0; f < F; ++f) want_bias[f] += want[r * F + f];
  Tensor grad_pre = Tensor::full({R, F}, 9.0), grad_bias = Tensor::full({F}, 0.5);
  linear_dgelu_backward(g, w2, pre, grad_pre, grad_bias);
  expect_close(grad_pre, want, 1e-5, 1e-4, "grad_pre");
  expect_close(grad_bias, want_bias, 1e-5, 1e-4, "grad_bias (+=)");
  Tensor no_bias;
  linear_dgelu_backward(g, w2, pre, grad_pre, no_bias);
  expect_close(grad_pre, want, 1e-5, 1e-4, "grad_pre without a bias");
  Tensor wrong_bias = Tensor::zeros({F + 1});
  expect_error_naming([&] { linear_dgelu_backward(g, w2, pre, grad_pre, wrong_bias); },
                      {"linear_dgelu_backward", "grad_bias"});
}

// The CPU runs the pair as one pass after its GEMM (bias + GELU; GELU's gradient + the bias
// gradient's row-chunked sums): the same bits as the ops one after another, on a shape large
// enough for the threads and for several row chunks.
TEST(LinearGelu, TheFusedPassesEqualTheOpsOneAfterAnother) {
  const std::uint64_t seed = fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t R = 300, K = 24, F = 96, N = 40;
  const Tensor x = random_tensor({R, K}, seed, 0), w = random_tensor({F, K}, seed, 1);
  const Tensor b = random_tensor({F}, seed, 2), w2 = random_tensor({N, F}, seed, 3), g = random_tensor({R, N}, seed, 4);
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(with_bias ? "bias" : "no bias");
    const Tensor bias = with_bias ? b : Tensor();
    Tensor pre = Tensor::empty({R, F}), y = Tensor::empty({R, F});
    linear_gelu_forward(x, w, bias, pre, y);
    Tensor step_pre = Tensor::empty({R, F}), step_y = Tensor::empty({R, F});
    linear_forward(LinearArgs{}, x, w, bias, step_pre);
    gelu_forward(GeluArgs{}, step_pre, step_y);
    EXPECT_EQ(to_f64(pre), to_f64(step_pre));
    EXPECT_EQ(to_f64(y), to_f64(step_y));

    Tensor grad_pre = Tensor::empty({R, F}), grad_bias = Tensor::full({F}, 0.25);
    Tensor no_bias;
    linear_dgelu_backward(g, w2, pre, grad_pre, with_bias ? grad_bias : no_bias);
    Tensor step_grad = Tensor::empty({R, F}), step_bias = Tensor::full({F}, 0.25), no_grad_x;
    matmul_forward(MatmulArgs{}, g, w2, step_grad);
    gelu_backward(GeluArgs{}, pre, step_grad, step_grad);
    if (with_bias) bias_add_backward(BiasAddArgs{}, step_grad, no_grad_x, step_bias);
    EXPECT_EQ(to_f64(grad_pre), to_f64(step_grad));
    EXPECT_EQ(to_f64(grad_bias), to_f64(step_bias));
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
