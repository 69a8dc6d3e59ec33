// adamw_update against a float64 loop of the same update over several steps (weight decay,
// bias correction, grad_scale), grad_norm_squared against a float64 sum and across thread
// counts, and the errors for bad hyper-parameters and mismatched shapes / dtypes. AdamW is an
// update, not a differentiable op, so there is no finite-difference check here.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <initializer_list>
#include <ostream>
#include <string>

#include "myriad/ops/adamw.h"
#include "myriad/ops/elementwise.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using testing::expect_error_naming;
using testing::ThreadCountGuard;
using testing::to_f64;

struct ReferenceState {
  std::vector<double> p, m, v;
};

// One AdamW step in float64, with the f32 hyper-parameters widened exactly.
void reference_adamw(const AdamWArgs& a, ReferenceState& s, const std::vector<double>& grad) {
  const double lr = a.lr, b1 = a.beta1, b2 = a.beta2, eps = a.eps, wd = a.weight_decay;
  const double t = static_cast<double>(a.step);
  for (std::size_t i = 0; i < s.p.size(); ++i) {
    const double g = grad[i] * static_cast<double>(a.grad_scale);
    s.p[i] -= lr * wd * s.p[i];
    s.m[i] = b1 * s.m[i] + (1.0 - b1) * g;
    s.v[i] = b2 * s.v[i] + (1.0 - b2) * g * g;
    const double m_hat = s.m[i] / (1.0 - std::pow(b1, t)), v_hat = s.v[i] / (1.0 - std::pow(b2, t));
    s.p[i] -= lr * m_hat / (std::sqrt(v_hat) + eps);
  }
}

struct AdamWCase {
  Shape shape;
  float lr, weight_decay, grad_scale;
};

void PrintTo(const AdamWCase& c, std::ostream* os) {
  *os << shape_string(c.shape) << " lr=" << c.lr << " wd=" << c.weight_decay << " grad_scale=" << c.grad_scale;
}

class AdamWReference : public ::testing::TestWithParam<AdamWCase> {};

TEST_P(AdamWReference, FiveStepsMatchFloat64) {
  const AdamWCase c = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Tensor param = testing::random_tensor(c.shape, seed, 0);
  Tensor m = Tensor::zeros(c.shape), v = Tensor::zeros(c.shape);
  ReferenceState ref{to_f64(param), to_f64(m), to_f64(v)};
  for (std::int64_t step = 1; step <= 5; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    AdamWArgs args{.lr = c.lr, .weight_decay = c.weight_decay, .step = step, .grad_scale = c.grad_scale};
    // Gradients over several magnitudes so that eps and the sqrt(v) ratio both matter.
    Tensor grad = testing::random_tensor(c.shape, seed, 10 + step, -2.0f, 2.0f);
    const std::vector<double> g = to_f64(grad);
    adamw_update(args, param, grad, m, v);
    reference_adamw(args, ref, g);
    testing::expect_close(grad, g, 0, 0, "grad is read only");
    // Each f32 step rounds p, m, v a few times (~6e-8 relative each). m can cancel towards 0
    // while its terms are O(0.2), hence an absolute floor (observed <= ~1.5e-8); |p| <~ 1 and
    // the update ratio m_hat / sqrt(v_hat) is O(1), so five steps stay within a few ulp(1).
    testing::expect_close(m, ref.m, 5e-8, 1e-6, "m");
    testing::expect_close(v, ref.v, 5e-8, 1e-6, "v");
    testing::expect_close(param, ref.p, 5e-7, 5e-7, "param");
  }
}

// Odd shapes, the vector tail, a size above the threads' threshold, grad_scale and weight decay.
INSTANTIATE_TEST_SUITE_P(Shapes, AdamWReference,
                         ::testing::Values(AdamWCase{{7}, 1e-2f, 0.1f, 1.0f}, AdamWCase{{3, 5, 7}, 3e-3f, 0.0f, 0.25f},
                                           AdamWCase{{40009}, 1e-2f, 0.1f, 0.5f}, AdamWCase{{1}, 1e-1f, 0.5f, 1.0f},
                                           AdamWCase{{0, 3}, 1e-2f, 0.1f, 1.0f}));

// The compute copies written in the update's pass are the updated param rounded to the format:
// the f32 copy equals round_to_format of it, the 16-bit copy its conversion, bit for bit; the
// update itself is the one without copies. Across the vector tail, and f16's saturation.
TEST(AdamW, ComputeCopiesAreTheUpdatedParamRoundedBitForBit) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  for (const DType format : {DType::bf16, DType::f16}) {
    for (const std::int64_t n : {std::int64_t{1}, std::int64_t{37}, std::int64_t{40009}}) {
      SCOPED_TRACE(std::string(dtype_name(format)) + " n " + std::to_string(n));
      Tensor param = testing::random_tensor({n}, seed, 1, -3.0f, 3.0f);
      param.data<float>()[0] = 70000.0f;  // beyond f16: the copies hold inf, as round_to_format does
      const Tensor grad = testing::random_tensor({n}, seed, 2);
      Tensor m = Tensor::zeros({n}), v = Tensor::zeros({n});
      Tensor plain = param.clone(), plain_m = m.clone(), plain_v = v.clone();
      const AdamWArgs args{.lr = 1e-2f, .weight_decay = 0.1f, .step = 2, .grad_scale = 0.5f};
      AdamWCopies copies{.format = format, .rounded = Tensor::full({n}, -1.0), .narrow = Tensor::empty({n}, format)};
      adamw_update(args, param, grad, m, v, copies);
      adamw_update(args, plain, grad, plain_m, plain_v);
      EXPECT_EQ(std::memcmp(param.raw_data(), plain.raw_data(), param.nbytes()), 0) << "the update changed";
      EXPECT_EQ(std::memcmp(m.raw_data(), plain_m.raw_data(), m.nbytes()), 0);
      Tensor rounded = param.clone();
      round_to_format(rounded, format);
      EXPECT_EQ(std::memcmp(copies.rounded.raw_data(), rounded.raw_data(), rounded.nbytes()), 0);
      Tensor narrow = Tensor::empty({n}, format);
      copy(param, narrow);
      EXPECT_EQ(std::memcmp(copies.narrow.raw_data(), narrow.raw_data(), narrow.nbytes()), 0);
      // Either copy alone.
      AdamWCopies only_narrow{.format = format, .narrow = Tensor::empty({n}, format)};
      adamw_update(args, plain, grad, plain_m, plain_v, only_narrow);
      Tensor again = Tensor::empty({n}, format);
      copy(plain, again);
      EXPECT_EQ(std::memcmp(only_narrow.narrow.raw_data(), again.raw_data(), again.nbytes()), 0);
    }
  }
  Tensor p = Tensor::zeros({4}), g = Tensor::zeros({4}), m = Tensor::zeros({4}), v = Tensor::zeros({4});
  const AdamWArgs args{.lr = 1e-3f, .step = 1};
  expect_error_naming([&] { adamw_update(args, p, g, m, v, {.format = DType::f32, .rounded = Tensor::zeros({4})}); },
                      {"adamw_update", "bf16 or f16", "f32"});
  expect_error_naming(
      [&] { adamw_update(args, p, g, m, v, {.format = DType::bf16, .narrow = Tensor::empty({4}, DType::f16)}); },
      {"adamw_update", "copies.narrow", "f16"});
  expect_error_naming(
      [&] { adamw_update(args, p, g, m, v, {.format = DType::bf16, .narrow = Tensor::empty({5}, DType::bf16)}); },
      {"adamw_update", "copies.narrow", "[5]"});
}

TEST(AdamW, FirstStepMovesEachParameterByAboutLr) {
  // Bias correction makes m_hat = g and v_hat = g^2 at step 1: the step is lr * sign(g)
  // (up to eps), after the decoupled decay p * (1 - lr * wd).
  Tensor param = Tensor::full({4}, 1.0), m = Tensor::zeros({4}), v = Tensor::zeros({4});
  Tensor grad = testing::from_f64({0.5, -2.0, 1e-3, -1e-3}, {4});
  adamw_update(AdamWArgs{.lr = 0.01f, .weight_decay = 0.1f, .step = 1}, param, grad, m, v);
  const double decayed = 1.0 - 0.01 * 0.1;
  testing::expect_close(param, {decayed - 0.01, decayed + 0.01, decayed - 0.01, decayed + 0.01}, 1e-6, 0, "first step");
}

TEST(AdamW, GradNormSquaredMatchesFloat64AndIsThreadCountIndependent) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  {
    ThreadCountGuard guard;
    for (const Shape& shape : {Shape{0}, Shape{1}, Shape{13}, Shape{5, 7}, Shape{100003}, Shape{3, 40000}}) {
      SCOPED_TRACE("shape " + shape_string(shape));
      Tensor grad = testing::random_tensor(shape, seed, 0, -3.0f, 3.0f);
      double expected = 0.0;
      for (double g : to_f64(grad)) expected += g * g;
      omp_set_num_threads(1);
      const double serial = grad_norm_squared(grad);
      // f32 squares are exact in float64; only the summation order differs from the reference.
      EXPECT_NEAR(serial, expected, 1e-12 * expected);
      for (int threads : {2, 3}) {
        omp_set_num_threads(threads);
        EXPECT_EQ(grad_norm_squared(grad), serial) << threads << " threads";
      }
    }
  }
  Tensor strided = testing::random_tensor({6, 5}, seed, 1).transpose(0, 1);
  double expected = 0.0;
  for (double g : to_f64(strided)) expected += g * g;
  EXPECT_NEAR(grad_norm_squared(strided), expected, 1e-12 * expected);
}

TEST(AdamW, BadHyperParametersAreRejected) {
  Tensor param = Tensor::zeros({3}), grad = Tensor::zeros({3}), m = Tensor::zeros({3}), v = Tensor::zeros({3});
  expect_error_naming([&] { adamw_update(AdamWArgs{.lr = 1e-3f}, param, grad, m, v); },
                      {"adamw_update", "step is 0", ">= 1"});
  expect_error_naming([&] { adamw_update(AdamWArgs{.lr = 1e-3f, .step = -2}, param, grad, m, v); },
                      {"adamw_update", "step is -2"});
  expect_error_naming([&] { adamw_update(AdamWArgs{.lr = 1e-3f, .beta2 = 1.0f, .step = 1}, param, grad, m, v); },
                      {"adamw_update", "beta2"});
  expect_error_naming([&] { adamw_update(AdamWArgs{.lr = 1e-3f, .eps = 0.0f, .step = 1}, param, grad, m, v); },
                      {"adamw_update", "eps"});
  expect_error_naming([&] { adamw_update(AdamWArgs{.lr = -1.0f, .step = 1}, param, grad, m, v); },
                      {"adamw_update", "lr"});
  expect_error_naming(
      [&] { adamw_update(AdamWArgs{.lr = 1e-3f, .step = 1, .grad_scale = INFINITY}, param, grad, m, v); },
      {"adamw_update", "grad_scale"});
}

TEST(AdamW, MismatchesNameTheOpAndShapes) {
  const AdamWArgs args{.lr = 1e-3f, .step = 1};
  Tensor param = Tensor::zeros({4, 3}), grad = Tensor::zeros({4, 3}), m = Tensor::zeros({4, 3}),
         v = Tensor::zeros({4, 3});
  Tensor bad_grad = Tensor::zeros({3, 4});
  expect_error_naming([&] { adamw_update(args, param, bad_grad, m, v); }, {"adamw_update", "grad", "[3, 4]", "[4, 3]"});
  Tensor bad_m = Tensor::zeros({12});
  expect_error_naming([&] { adamw_update(args, param, grad, bad_m, v); }, {"adamw_update", "'m'", "[12]", "[4, 3]"});
  Tensor bad_v = Tensor::zeros({4, 3, 1});
  expect_error_naming([&] { adamw_update(args, param, grad, m, bad_v); },
                      {"adamw_update", "'v'", "[4, 3, 1]", "[4, 3]"});
  Tensor int_v = Tensor::zeros({4, 3}, DType::i32);
  expect_error_naming([&] { adamw_update(args, param, grad, m, int_v); }, {"adamw_update", "'v'", "i32", "[4, 3]"});
  Tensor int_param = Tensor::zeros({4, 3}, DType::i32);
  expect_error_naming([&] { adamw_update(args, int_param, grad, m, v); }, {"adamw_update", "param", "i32", "[4, 3]"});
  Tensor strided_param = Tensor::zeros({3, 4}).transpose(0, 1);
  expect_error_naming([&] { adamw_update(args, strided_param, grad, m, v); },
                      {"adamw_update", "param", "contiguous", "[4, 3]"});
  Tensor int_grad = Tensor::zeros({2}, DType::i32);
  expect_error_naming([&] { grad_norm_squared(int_grad); }, {"grad_norm_squared", "grad", "i32"});
}

}  // namespace
}  // namespace myriad
