// bias_add against a naive float64 reference: forward (also in place), backward of x and bias
// against central finite differences, `=` / `+=` gradient semantics, thread-count independence
// of the bias gradient, and argument errors that name the op and the shapes.
#include <gtest/gtest.h>
#include <omp.h>

#include <limits>

#include "myriad/ops/bias_add.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using testing::expect_error_naming;
using testing::ThreadCountGuard;
using testing::to_f64;

std::vector<double> reference_bias_add(const std::vector<double>& x, const std::vector<double>& bias) {
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) out[i] = x[i] + bias[i % bias.size()];
  return out;
}

// One f32 rounding per element forward; the bias gradient sums N values of O(1) in f32 per chunk.
constexpr double kTol = 1e-5;

class BiasAddReference : public ::testing::TestWithParam<Shape> {};

TEST_P(BiasAddReference, ForwardAndBackwardMatchFloat64) {
  const Shape shape = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t c = shape.back();
  Tensor x = testing::random_tensor(shape, seed, 0), bias = testing::random_tensor({c}, seed, 1);
  Tensor out = Tensor::full(shape, std::numeric_limits<double>::quiet_NaN());
  bias_add_forward(BiasAddArgs{}, x, bias, out);
  std::vector<double> xv = to_f64(x), bv = to_f64(bias);
  testing::expect_close(out, reference_bias_add(xv, bv), kTol, kTol, "bias_add out");

  Tensor r = testing::random_tensor(shape, seed, 2);
  std::vector<double> rv = to_f64(r);
  Tensor grad_x = Tensor::full(shape, std::numeric_limits<double>::quiet_NaN());  // must be overwritten
  Tensor grad_bias = Tensor::zeros({c});
  bias_add_backward(BiasAddArgs{}, r, grad_x, grad_bias);
  auto loss_x = [&](const std::vector<double>& v) { return testing::dot(reference_bias_add(v, bv), rv); };
  auto loss_b = [&](const std::vector<double>& v) { return testing::dot(reference_bias_add(xv, v), rv); };
  std::vector<double> fd_x = testing::numerical_gradient(loss_x, xv);
  std::vector<double> fd_b = testing::numerical_gradient(loss_b, bv);
  testing::expect_close(grad_x, fd_x, kTol, kTol, "bias_add grad_x");
  testing::expect_close(grad_bias, fd_b, kTol, kTol, "bias_add grad_bias");

  // Second backward: grad_bias accumulates (doubled), grad_x is written again.
  bias_add_backward(BiasAddArgs{}, r, grad_x, grad_bias);
  std::vector<double> doubled = fd_b;
  for (double& v : doubled) v *= 2.0;
  testing::expect_close(grad_x, fd_x, kTol, kTol, "bias_add grad_x after second backward");
  testing::expect_close(grad_bias, doubled, 2 * kTol, kTol, "bias_add grad_bias accumulated");
}

INSTANTIATE_TEST_SUITE_P(Shapes, BiasAddReference,
                         ::testing::Values(Shape{3, 5}, Shape{2, 3, 7}, Shape{1, 16}, Shape{37, 3}, Shape{4, 1},
                                           Shape{9}));

TEST(BiasAdd, InPlaceAndAliasedCalls) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Tensor x = testing::random_tensor({6, 10}, seed, 0), bias = testing::random_tensor({10}, seed, 1);
  std::vector<double> expected = reference_bias_add(to_f64(x), to_f64(bias));
  bias_add_forward(BiasAddArgs{}, x, bias, x);  // out aliases x
  testing::expect_close(x, expected, kTol, kTol, "bias_add in place");
  // grad_x aliasing grad_out is left as it is; only grad_bias is computed.
  Tensor dy = testing::random_tensor({6, 10}, seed, 2), gb = Tensor::zeros({10});
  std::vector<double> dyv = to_f64(dy), colsum(10, 0.0);
  for (std::size_t i = 0; i < dyv.size(); ++i) colsum[i % 10] += dyv[i];
  bias_add_backward(BiasAddArgs{}, dy, dy, gb);
  testing::expect_close(dy, dyv, 0, 0, "grad_x aliasing grad_out");
  testing::expect_close(gb, colsum, kTol, kTol, "grad_bias with aliased grad_x");
  Tensor none, gb_only = Tensor::zeros({10});
  bias_add_backward(BiasAddArgs{}, dy, none, gb_only);
  testing::expect_close(gb_only, colsum, kTol, kTol, "grad_bias alone");
}

TEST(BiasAdd, BiasGradientIsIndependentOfThreadCount) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const Shape shape{7, 131, 67};  // parallel path, many chunks, odd sizes
  Tensor dy = testing::random_tensor(shape, seed, 0);
  ThreadCountGuard guard;
  std::vector<std::vector<double>> runs;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    Tensor gx = Tensor::empty(shape), gb = Tensor::zeros({67});
    bias_add_backward(BiasAddArgs{}, dy, gx, gb);
    runs.push_back(to_f64(gb));
  }
  EXPECT_EQ(runs[0], runs[1]) << "1 vs 2 threads";
  EXPECT_EQ(runs[0], runs[2]) << "1 vs 3 threads";
}

TEST(BiasAdd, MismatchesNameTheOpAndShapes) {
  Tensor x = Tensor::zeros({2, 3, 4}), bias = Tensor::zeros({4}), out = Tensor::zeros({2, 3, 4});
  Tensor bad_bias = Tensor::zeros({3}), bad_out = Tensor::zeros({6, 4}), ints = Tensor::zeros({4}, DType::i32);
  expect_error_naming([&] { bias_add_forward(BiasAddArgs{}, x, bad_bias, out); },
                      {"bias_add_forward", "bias", "[3]", "[4]"});
  expect_error_naming([&] { bias_add_forward(BiasAddArgs{}, x, bias, bad_out); },
                      {"bias_add_forward", "out", "[6, 4]", "[2, 3, 4]"});
  expect_error_naming([&] { bias_add_forward(BiasAddArgs{}, x, ints, out); },
                      {"bias_add_forward", "bias", "i32", "[4]"});
  Tensor strided = Tensor::zeros({4, 3, 2}).transpose(0, 2);
  expect_error_naming([&] { bias_add_forward(BiasAddArgs{}, strided, bias, out); },
                      {"bias_add_forward", "contiguous", "[2, 3, 4]"});
  Tensor gb = Tensor::zeros({4});
  expect_error_naming([&] { bias_add_backward(BiasAddArgs{}, x, bad_out, gb); },
                      {"bias_add_backward", "grad_x", "[6, 4]", "[2, 3, 4]"});
  expect_error_naming([&] { bias_add_backward(BiasAddArgs{}, x, out, bad_bias); },
                      {"bias_add_backward", "grad_bias", "[3]", "[4]"});
  Tensor int_dy = Tensor::zeros({2, 3, 4}, DType::i32);
  expect_error_naming([&] { bias_add_backward(BiasAddArgs{}, int_dy, out, gb); },
                      {"bias_add_backward", "grad_out", "i32", "[2, 3, 4]"});
}

}  // namespace
}  // namespace myriad
