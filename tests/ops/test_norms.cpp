// layernorm / rmsnorm against naive float64 references: forward (out, mean, rstd), backward
// of every input (x, weight, bias) against central finite differences of the float64 forward,
// `=` / `+=` gradient semantics, thread-count independence of the parameter gradients, and
// argument errors that name the op and the shapes.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <string>

#include "myriad/ops/norms.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using testing::expect_error_naming;
using testing::ThreadCountGuard;
using testing::to_f64;

struct NormRef {
  std::vector<double> out, mean, rstd;
};

// Rows of x (N, C) as flat float64; bias empty = no bias.
NormRef reference_layernorm(const std::vector<double>& x, const std::vector<double>& w, const std::vector<double>& b,
                            std::int64_t n_rows, std::int64_t c, double eps) {
  NormRef ref{std::vector<double>(x.size()), std::vector<double>(n_rows), std::vector<double>(n_rows)};
  for (std::int64_t n = 0; n < n_rows; ++n) {
    double mean = 0.0, var = 0.0;
    for (std::int64_t j = 0; j < c; ++j) mean += x[n * c + j];
    mean /= static_cast<double>(c);
    for (std::int64_t j = 0; j < c; ++j) var += (x[n * c + j] - mean) * (x[n * c + j] - mean);
    var /= static_cast<double>(c);
    double rstd = 1.0 / std::sqrt(var + eps);
    for (std::int64_t j = 0; j < c; ++j) {
      ref.out[n * c + j] = (x[n * c + j] - mean) * rstd * w[j] + (b.empty() ? 0.0 : b[j]);
    }
    ref.mean[n] = mean;
    ref.rstd[n] = rstd;
  }
  return ref;
}

NormRef reference_rmsnorm(const std::vector<double>& x, const std::vector<double>& w, std::int64_t n_rows,
                          std::int64_t c, double eps) {
  NormRef ref{std::vector<double>(x.size()), {}, std::vector<double>(n_rows)};
  for (std::int64_t n = 0; n < n_rows; ++n) {
    double sq = 0.0;
    for (std::int64_t j = 0; j < c; ++j) sq += x[n * c + j] * x[n * c + j];
    double rstd = 1.0 / std::sqrt(sq / static_cast<double>(c) + eps);
    for (std::int64_t j = 0; j < c; ++j) ref.out[n * c + j] = x[n * c + j] * rstd * w[j];
    ref.rstd[n] = rstd;
  }
  return ref;
}

std::vector<double> scaled(std::vector<double> v, double s) {
  for (double& e : v) e *= s;
  return v;
}

Shape leading_dims(const Shape& shape) { return Shape(shape.begin(), shape.end() - 1); }

struct NormCase {
  Shape shape;  // x's shape; last dim is C
  bool with_bias;
};

class LayernormReference : public ::testing::TestWithParam<NormCase> {};

// Tolerances: f32 arithmetic over O(C) terms against float64 gives errors of a few 1e-7
// relative on values of order 1 (rstd of uniform inputs is ~1.7); 1e-5 leaves margin while
// still catching any wrong term (those are O(1e-2) or larger). Rows whose variance happens to
// be tiny (rstd r large, always for C = 1 where r = 1/sqrt(eps)) are ill-conditioned: xhat
// carries an f32 error ~ r * ulp, and grad_x = r * (terms in xhat) an error ~ r^2 * ulp, so
// grad_x is compared row by row with atol scaled by max(1, r^2), grad_weight with max(1, r).
constexpr double kNormTol = 1e-5;

double max_rstd(const std::vector<double>& rstd) {
  double m = 1.0;
  for (double r : rstd) m = std::max(m, r);
  return m;
}

// grad_x (N, C) against `expected`, row n with atol kNormTol * max(1, rstd[n]^2).
void expect_rows_close(const Tensor& actual, const std::vector<double>& expected, const std::vector<double>& rstd,
                       std::int64_t c, const std::string& what) {
  std::vector<double> got = to_f64(actual);
  for (std::size_t n = 0; n < rstd.size(); ++n) {
    auto first = static_cast<std::ptrdiff_t>(n) * c;
    std::vector<double> got_row(got.begin() + first, got.begin() + first + c);
    std::vector<double> want_row(expected.begin() + first, expected.begin() + first + c);
    double scale = std::max(1.0, rstd[n] * rstd[n]);
    testing::expect_close(got_row, want_row, kNormTol * scale, kNormTol, what + " row " + std::to_string(n));
  }
}

TEST_P(LayernormReference, ForwardAndBackwardMatchFloat64) {
  const NormCase p = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t c = p.shape.back(), n = shape_numel(p.shape) / c;
  const double eps = 1e-5;
  Tensor x = testing::random_tensor(p.shape, seed, 0);
  Tensor w = testing::random_tensor({c}, seed, 1, 0.5f, 1.5f);
  Tensor b = p.with_bias ? testing::random_tensor({c}, seed, 2) : Tensor();
  Tensor out = Tensor::empty(p.shape);
  // mean as (N), rstd as the leading dims of x: both layouts are accepted.
  Tensor mean = Tensor::empty({n}), rstd = Tensor::empty(leading_dims(p.shape));
  LayernormArgs args{.eps = 1e-5f};
  layernorm_forward(args, x, w, b, out, mean, rstd);

  std::vector<double> xv = to_f64(x), wv = to_f64(w), bv = p.with_bias ? to_f64(b) : std::vector<double>{};
  NormRef ref = reference_layernorm(xv, wv, bv, n, c, eps);
  testing::expect_close(out, ref.out, kNormTol, kNormTol, "layernorm out");
  testing::expect_close(mean, ref.mean, kNormTol, kNormTol, "layernorm mean");
  testing::expect_close(rstd, ref.rstd, kNormTol, kNormTol, "layernorm rstd");

  // L = sum(out * r): gradients against central differences of the float64 forward.
  Tensor r = testing::random_tensor(p.shape, seed, 3);
  std::vector<double> rv = to_f64(r);
  Tensor grad_x = Tensor::full(p.shape, std::numeric_limits<double>::quiet_NaN());  // must be overwritten
  Tensor grad_w = Tensor::zeros({c});
  Tensor grad_b = p.with_bias ? Tensor::zeros({c}) : Tensor();
  layernorm_backward(args, x, w, mean, rstd, r, grad_x, grad_w, grad_b);
  auto loss_x = [&](const std::vector<double>& v) {
    return testing::dot(reference_layernorm(v, wv, bv, n, c, eps).out, rv);
  };
  auto loss_w = [&](const std::vector<double>& v) {
    return testing::dot(reference_layernorm(xv, v, bv, n, c, eps).out, rv);
  };
  auto loss_b = [&](const std::vector<double>& v) {
    return testing::dot(reference_layernorm(xv, wv, v, n, c, eps).out, rv);
  };
  std::vector<double> fd_x = testing::numerical_gradient(loss_x, xv);
  std::vector<double> fd_w = testing::numerical_gradient(loss_w, wv);
  const double w_tol = kNormTol * max_rstd(ref.rstd);
  expect_rows_close(grad_x, fd_x, ref.rstd, c, "layernorm grad_x");
  testing::expect_close(grad_w, fd_w, w_tol, kNormTol, "layernorm grad_weight");
  std::vector<double> fd_b;
  if (p.with_bias) {
    fd_b = testing::numerical_gradient(loss_b, bv);
    testing::expect_close(grad_b, fd_b, kNormTol, kNormTol, "layernorm grad_bias");
  }

  // A second backward: parameter grads accumulate (doubled), grad_x is written again (unchanged).
  layernorm_backward(args, x, w, mean, rstd, r, grad_x, grad_w, grad_b);
  expect_rows_close(grad_x, fd_x, ref.rstd, c, "layernorm grad_x after second backward");
  testing::expect_close(grad_w, scaled(fd_w, 2.0), 2 * w_tol, kNormTol, "layernorm grad_weight accumulated");
  if (p.with_bias)
    testing::expect_close(grad_b, scaled(fd_b, 2.0), 2 * kNormTol, kNormTol, "layernorm grad_bias accumulated");
}

INSTANTIATE_TEST_SUITE_P(Shapes, LayernormReference,
                         ::testing::Values(NormCase{{3, 5}, true}, NormCase{{2, 3, 7}, true},
                                           NormCase{{2, 3, 7}, false}, NormCase{{1, 16}, true},
                                           NormCase{{17, 3}, false}, NormCase{{4, 1}, true}, NormCase{{5}, true}));

class RmsnormReference : public ::testing::TestWithParam<Shape> {};

TEST_P(RmsnormReference, ForwardAndBackwardMatchFloat64) {
  const Shape shape = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t c = shape.back(), n = shape_numel(shape) / c;
  const double eps = 1e-5;
  Tensor x = testing::random_tensor(shape, seed, 0);
  Tensor w = testing::random_tensor({c}, seed, 1, 0.5f, 1.5f);
  Tensor out = Tensor::empty(shape), rstd = Tensor::empty(leading_dims(shape));
  RmsnormArgs args{.eps = 1e-5f};
  rmsnorm_forward(args, x, w, out, rstd);
  std::vector<double> xv = to_f64(x), wv = to_f64(w);
  NormRef ref = reference_rmsnorm(xv, wv, n, c, eps);
  testing::expect_close(out, ref.out, kNormTol, kNormTol, "rmsnorm out");
  testing::expect_close(rstd, ref.rstd, kNormTol, kNormTol, "rmsnorm rstd");

  Tensor r = testing::random_tensor(shape, seed, 3);
  std::vector<double> rv = to_f64(r);
  Tensor grad_x = Tensor::full(shape, std::numeric_limits<double>::quiet_NaN());
  Tensor grad_w = Tensor::zeros({c});
  rmsnorm_backward(args, x, w, rstd, r, grad_x, grad_w);
  auto loss_x = [&](const std::vector<double>& v) { return testing::dot(reference_rmsnorm(v, wv, n, c, eps).out, rv); };
  auto loss_w = [&](const std::vector<double>& v) { return testing::dot(reference_rmsnorm(xv, v, n, c, eps).out, rv); };
  std::vector<double> fd_x = testing::numerical_gradient(loss_x, xv);
  std::vector<double> fd_w = testing::numerical_gradient(loss_w, wv);
  const double w_tol = kNormTol * max_rstd(ref.rstd);
  expect_rows_close(grad_x, fd_x, ref.rstd, c, "rmsnorm grad_x");
  testing::expect_close(grad_w, fd_w, w_tol, kNormTol, "rmsnorm grad_weight");

  rmsnorm_backward(args, x, w, rstd, r, grad_x, grad_w);
  expect_rows_close(grad_x, fd_x, ref.rstd, c, "rmsnorm grad_x after second backward");
  testing::expect_close(grad_w, scaled(fd_w, 2.0), 2 * w_tol, kNormTol, "rmsnorm grad_weight accumulated");
}

INSTANTIATE_TEST_SUITE_P(Shapes, RmsnormReference,
                         ::testing::Values(Shape{3, 5}, Shape{2, 3, 7}, Shape{1, 16}, Shape{17, 3}, Shape{4, 1},
                                           Shape{6}));

TEST(Norms, ParameterGradientsAreIndependentOfThreadCount) {
  // Large enough to take the parallel path and span many chunks; odd sizes on purpose.
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const Shape shape{3, 101, 129};
  const std::int64_t c = shape.back();
  Tensor x = testing::random_tensor(shape, seed, 0), w = testing::random_tensor({c}, seed, 1);
  Tensor b = testing::random_tensor({c}, seed, 2), dy = testing::random_tensor(shape, seed, 3);
  Tensor out = Tensor::empty(shape), mean = Tensor::empty({3, 101}), rstd = Tensor::empty({3, 101});
  layernorm_forward(LayernormArgs{}, x, w, b, out, mean, rstd);
  ThreadCountGuard guard;
  std::vector<std::vector<double>> runs;
  for (int threads : {1, 2, 3}) {
    omp_set_num_threads(threads);
    Tensor gx = Tensor::empty(shape), gw = Tensor::zeros({c}), gb = Tensor::zeros({c}), rgw = Tensor::zeros({c});
    layernorm_backward(LayernormArgs{}, x, w, mean, rstd, dy, gx, gw, gb);
    Tensor rms_out = Tensor::empty(shape), rms_rstd = Tensor::empty({3, 101}), no_gx;
    rmsnorm_forward(RmsnormArgs{}, x, w, rms_out, rms_rstd);
    rmsnorm_backward(RmsnormArgs{}, x, w, rms_rstd, dy, no_gx, rgw);
    std::vector<double> all = to_f64(gx);
    for (const Tensor* t : {&gw, &gb, &rgw, &out, &rms_out}) {
      std::vector<double> v = to_f64(*t);
      all.insert(all.end(), v.begin(), v.end());
    }
    runs.push_back(all);
  }
  EXPECT_EQ(runs[0], runs[1]) << "1 vs 2 threads";
  EXPECT_EQ(runs[0], runs[2]) << "1 vs 3 threads";
}

TEST(Norms, OptionalOutputsMaySkip) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Tensor x = testing::random_tensor({4, 6}, seed, 0), w = testing::random_tensor({6}, seed, 1);
  Tensor b = testing::random_tensor({6}, seed, 2), dy = testing::random_tensor({4, 6}, seed, 3);
  Tensor out = Tensor::empty({4, 6}), none;
  layernorm_forward(LayernormArgs{}, x, w, b, out, none, none);  // inference: no saved stats
  NormRef ref = reference_layernorm(to_f64(x), to_f64(w), to_f64(b), 4, 6, 1e-5);
  testing::expect_close(out, ref.out, kNormTol, kNormTol, "layernorm out without saved stats");
  // Only grad_bias requested: equals the column sums of grad_out.
  Tensor mean = testing::from_f64(ref.mean, {4}), rstd = testing::from_f64(ref.rstd, {4});
  Tensor gb = Tensor::zeros({6}), no_gx, no_gw;
  layernorm_backward(LayernormArgs{}, x, w, mean, rstd, dy, no_gx, no_gw, gb);
  std::vector<double> dyv = to_f64(dy), colsum(6, 0.0);
  for (int i = 0; i < 24; ++i) colsum[i % 6] += dyv[i];
  testing::expect_close(gb, colsum, kNormTol, kNormTol, "layernorm grad_bias alone");
}

TEST(Norms, MismatchesNameTheOpAndShapes) {
  Tensor x = Tensor::zeros({2, 3, 4}), w = Tensor::zeros({4}), b = Tensor::zeros({4});
  Tensor out = Tensor::zeros({2, 3, 4}), mean = Tensor::zeros({6}), rstd = Tensor::zeros({2, 3});
  Tensor bad_w = Tensor::zeros({5}), none;
  expect_error_naming([&] { layernorm_forward(LayernormArgs{}, x, bad_w, b, out, mean, rstd); },
                      {"layernorm_forward", "weight", "[5]", "[4]"});
  expect_error_naming([&] { layernorm_forward(LayernormArgs{}, x, w, bad_w, out, mean, rstd); },
                      {"layernorm_forward", "bias", "[5]", "[4]"});
  Tensor bad_out = Tensor::zeros({2, 4, 4});
  expect_error_naming([&] { layernorm_forward(LayernormArgs{}, x, w, b, bad_out, mean, rstd); },
                      {"layernorm_forward", "out", "[2, 4, 4]", "[2, 3, 4]"});
  Tensor bad_mean = Tensor::zeros({3, 2});
  expect_error_naming([&] { layernorm_forward(LayernormArgs{}, x, w, b, out, bad_mean, rstd); },
                      {"layernorm_forward", "mean", "[3, 2]", "[2, 3]", "[6]"});
  Tensor int_x = Tensor::zeros({2, 3, 4}, DType::i32);
  expect_error_naming([&] { layernorm_forward(LayernormArgs{}, int_x, w, b, out, mean, rstd); },
                      {"layernorm_forward", "'x'", "i32", "[2, 3, 4]"});
  Tensor strided = Tensor::zeros({4, 2, 3}).transpose(0, 2);  // (3, 2, 4), not contiguous
  expect_error_naming([&] { layernorm_forward(LayernormArgs{}, strided, w, b, out, mean, rstd); },
                      {"layernorm_forward", "contiguous", "[3, 2, 4]"});
  Tensor scalar = Tensor::zeros({});
  expect_error_naming([&] { layernorm_forward(LayernormArgs{}, scalar, w, b, out, mean, rstd); },
                      {"layernorm_forward", "[]"});

  Tensor gx = Tensor::zeros({2, 3, 4}), gw = Tensor::zeros({4}), gb = Tensor::zeros({4});
  Tensor bad_dy = Tensor::zeros({6, 4});
  expect_error_naming([&] { layernorm_backward(LayernormArgs{}, x, w, mean, rstd, bad_dy, gx, gw, gb); },
                      {"layernorm_backward", "grad_out", "[6, 4]", "[2, 3, 4]"});
  Tensor bad_gb = Tensor::zeros({3});
  expect_error_naming([&] { layernorm_backward(LayernormArgs{}, x, w, mean, rstd, x, gx, gw, bad_gb); },
                      {"layernorm_backward", "grad_bias", "[3]", "[4]"});
  expect_error_naming([&] { layernorm_backward(LayernormArgs{}, x, w, none, rstd, x, gx, gw, gb); },
                      {"layernorm_backward", "mean", "undefined"});

  expect_error_naming([&] { rmsnorm_forward(RmsnormArgs{}, x, bad_w, out, rstd); },
                      {"rmsnorm_forward", "weight", "[5]", "[4]"});
  Tensor int_w = Tensor::zeros({4}, DType::i32);
  expect_error_naming([&] { rmsnorm_forward(RmsnormArgs{}, x, int_w, out, rstd); },
                      {"rmsnorm_forward", "weight", "i32", "[4]"});
  expect_error_naming([&] { rmsnorm_backward(RmsnormArgs{}, x, w, bad_mean, x, gx, gw); },
                      {"rmsnorm_backward", "rstd", "[3, 2]", "[2, 3]"});
  expect_error_naming([&] { rmsnorm_backward(RmsnormArgs{}, x, w, rstd, x, gx, bad_w); },
                      {"rmsnorm_backward", "grad_weight", "[5]", "[4]"});
}

}  // namespace
}  // namespace myriad
