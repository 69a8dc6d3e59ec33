// gelu / swiglu against naive float64 references: forward, backward of every input against
// central finite differences, `=` semantics of the gradients, in-place calls, saturated
// inputs that must stay finite, and argument errors that name the op and the shapes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "myriad/ops/activations.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using testing::expect_error_naming;
using testing::to_f64;

std::vector<double> reference_gelu(const std::vector<double>& x) {
  const double scale = std::sqrt(2.0 / M_PI);
  std::vector<double> out(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    out[i] = 0.5 * x[i] * (1.0 + std::tanh(scale * (x[i] + 0.044715 * x[i] * x[i] * x[i])));
  }
  return out;
}

std::vector<double> reference_swiglu(const std::vector<double>& gate, const std::vector<double>& up) {
  std::vector<double> out(gate.size());
  for (std::size_t i = 0; i < gate.size(); ++i) out[i] = gate[i] / (1.0 + std::exp(-gate[i])) * up[i];
  return out;
}

Tensor nan_tensor(const Shape& shape) { return Tensor::full(shape, std::numeric_limits<double>::quiet_NaN()); }

// f32 transcendental functions are within a few ulp; values here are O(1..10), so 1e-5
// relative (plus 1e-6 absolute near zero crossings) still catches any wrong term.
constexpr double kAtol = 1e-6, kRtol = 1e-5;

class ActivationReference : public ::testing::TestWithParam<Shape> {};

TEST_P(ActivationReference, GeluMatchesFloat64) {
  const Shape shape = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Tensor x = testing::random_tensor(shape, seed, 0, -4.0f, 4.0f);  // covers both tails and the knee
  Tensor out = nan_tensor(shape);
  gelu_forward(GeluArgs{}, x, out);
  std::vector<double> xv = to_f64(x);
  testing::expect_close(out, reference_gelu(xv), kAtol, kRtol, "gelu out");

  Tensor r = testing::random_tensor(shape, seed, 1);
  std::vector<double> rv = to_f64(r);
  Tensor grad_x = nan_tensor(shape);  // must be overwritten
  gelu_backward(GeluArgs{}, x, r, grad_x);
  auto loss = [&](const std::vector<double>& v) { return testing::dot(reference_gelu(v), rv); };
  std::vector<double> fd = testing::numerical_gradient(loss, xv);
  testing::expect_close(grad_x, fd, kAtol, kRtol, "gelu grad_x");
  gelu_backward(GeluArgs{}, x, r, grad_x);  // written, not accumulated
  testing::expect_close(grad_x, fd, kAtol, kRtol, "gelu grad_x after second backward");
}

TEST_P(ActivationReference, SwigluMatchesFloat64) {
  const Shape shape = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Tensor gate = testing::random_tensor(shape, seed, 0, -5.0f, 5.0f);
  Tensor up = testing::random_tensor(shape, seed, 1, -2.0f, 2.0f);
  Tensor out = nan_tensor(shape);
  swiglu_forward(SwigluArgs{}, gate, up, out);
  std::vector<double> gv = to_f64(gate), uv = to_f64(up);
  testing::expect_close(out, reference_swiglu(gv, uv), kAtol, kRtol, "swiglu out");

  Tensor r = testing::random_tensor(shape, seed, 2);
  std::vector<double> rv = to_f64(r);
  Tensor grad_gate = nan_tensor(shape), grad_up = nan_tensor(shape);
  swiglu_backward(SwigluArgs{}, gate, up, r, grad_gate, grad_up);
  auto loss_gate = [&](const std::vector<double>& v) { return testing::dot(reference_swiglu(v, uv), rv); };
  auto loss_up = [&](const std::vector<double>& v) { return testing::dot(reference_swiglu(gv, v), rv); };
  std::vector<double> fd_gate = testing::numerical_gradient(loss_gate, gv);
  std::vector<double> fd_up = testing::numerical_gradient(loss_up, uv);
  testing::expect_close(grad_gate, fd_gate, kAtol, kRtol, "swiglu grad_gate");
  testing::expect_close(grad_up, fd_up, kAtol, kRtol, "swiglu grad_up");
  swiglu_backward(SwigluArgs{}, gate, up, r, grad_gate, grad_up);  // written, not accumulated
  testing::expect_close(grad_gate, fd_gate, kAtol, kRtol, "swiglu grad_gate after second backward");
  testing::expect_close(grad_up, fd_up, kAtol, kRtol, "swiglu grad_up after second backward");

  // Either gradient may be skipped.
  Tensor only_up = nan_tensor(shape), none;
  swiglu_backward(SwigluArgs{}, gate, up, r, none, only_up);
  testing::expect_close(only_up, fd_up, kAtol, kRtol, "swiglu grad_up alone");
}

INSTANTIATE_TEST_SUITE_P(Shapes, ActivationReference,
                         ::testing::Values(Shape{1}, Shape{7}, Shape{3, 5}, Shape{2, 3, 11}, Shape{4, 1, 33}));

TEST(Activations, InPlaceCallsMatchOutOfPlace) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const Shape shape{5, 9};
  Tensor x = testing::random_tensor(shape, seed, 0, -3.0f, 3.0f), dy = testing::random_tensor(shape, seed, 1);
  Tensor out = Tensor::empty(shape), dx = Tensor::empty(shape);
  gelu_forward(GeluArgs{}, x, out);
  gelu_backward(GeluArgs{}, x, dy, dx);
  Tensor in_place = x.clone(), dy_in_place = dy.clone();
  gelu_backward(GeluArgs{}, x, dy_in_place, dy_in_place);
  gelu_forward(GeluArgs{}, in_place, in_place);
  testing::expect_close(in_place, to_f64(out), 0, 0, "gelu in place");
  testing::expect_close(dy_in_place, to_f64(dx), 0, 0, "gelu backward in place");

  Tensor up = testing::random_tensor(shape, seed, 2);
  Tensor sw = Tensor::empty(shape), dg = Tensor::empty(shape), du = Tensor::empty(shape);
  swiglu_forward(SwigluArgs{}, x, up, sw);
  swiglu_backward(SwigluArgs{}, x, up, dy, dg, du);
  Tensor gate2 = x.clone(), up2 = up.clone(), dy2 = dy.clone();
  swiglu_backward(SwigluArgs{}, gate2, up2, dy2, dy2, up2);  // grad_gate over grad_out, grad_up over up
  testing::expect_close(dy2, to_f64(dg), 0, 0, "swiglu grad_gate in place");
  testing::expect_close(up2, to_f64(du), 0, 0, "swiglu grad_up in place");
  swiglu_forward(SwigluArgs{}, gate2, up, gate2);
  testing::expect_close(gate2, to_f64(sw), 0, 0, "swiglu in place");
}

TEST(Activations, SaturatedInputsStayFinite) {
  const std::vector<double> values{-1000.0, -90.0, -20.0, 0.0, 20.0, 90.0, 1000.0};
  const Shape shape{static_cast<std::int64_t>(values.size())};
  Tensor x = testing::from_f64(values, shape), ones = Tensor::full(shape, 1.0);
  Tensor out = Tensor::empty(shape), dx = Tensor::empty(shape);
  gelu_forward(GeluArgs{}, x, out);
  gelu_backward(GeluArgs{}, x, ones, dx);
  // gelu -> 0 (slope 0) on the far left, -> x (slope 1) on the far right.
  testing::expect_close(out, {0, 0, 0, 0, 20, 90, 1000}, 1e-6, 1e-7, "gelu saturated");
  testing::expect_close(dx, {0, 0, 0, 0.5, 1, 1, 1}, 1e-6, 1e-7, "gelu' saturated");
  Tensor sw = Tensor::empty(shape), dg = Tensor::empty(shape), du = Tensor::empty(shape);
  swiglu_forward(SwigluArgs{}, x, ones, sw);
  swiglu_backward(SwigluArgs{}, x, ones, ones, dg, du);
  std::vector<double> expected_silu = reference_swiglu(values, std::vector<double>(values.size(), 1.0));
  testing::expect_close(sw, expected_silu, 1e-6, 1e-6, "silu saturated");
  std::vector<double> expected_dsilu(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) {
    double s = 1.0 / (1.0 + std::exp(-values[i]));
    expected_dsilu[i] = s * (1.0 + values[i] * (1.0 - s));
  }
  testing::expect_close(dg, expected_dsilu, 1e-6, 1e-6, "silu' saturated");
  testing::expect_close(du, expected_silu, 1e-6, 1e-6, "swiglu grad_up saturated");
}

TEST(Activations, MismatchesNameTheOpAndShapes) {
  Tensor x = Tensor::zeros({2, 6}), bad = Tensor::zeros({2, 5}), ints = Tensor::zeros({2, 6}, DType::i32);
  Tensor out = Tensor::zeros({2, 6}), none;
  expect_error_naming([&] { gelu_forward(GeluArgs{}, x, bad); }, {"gelu_forward", "out", "[2, 5]", "[2, 6]"});
  expect_error_naming([&] { gelu_forward(GeluArgs{}, ints, out); }, {"gelu_forward", "'x'", "i32", "[2, 6]"});
  expect_error_naming([&] { gelu_backward(GeluArgs{}, x, bad, out); },
                      {"gelu_backward", "grad_out", "[2, 5]", "[2, 6]"});
  expect_error_naming([&] { gelu_backward(GeluArgs{}, x, x, none); }, {"gelu_backward", "grad_x", "undefined"});
  Tensor strided = Tensor::zeros({6, 2}).transpose(0, 1);
  expect_error_naming([&] { gelu_forward(GeluArgs{}, strided, out); }, {"gelu_forward", "contiguous", "[2, 6]"});
  expect_error_naming([&] { swiglu_forward(SwigluArgs{}, x, bad, out); }, {"swiglu_forward", "up", "[2, 5]", "[2, 6]"});
  expect_error_naming([&] { swiglu_forward(SwigluArgs{}, x, ints, out); }, {"swiglu_forward", "up", "i32", "[2, 6]"});
  expect_error_naming([&] { swiglu_backward(SwigluArgs{}, x, x, x, bad, out); },
                      {"swiglu_backward", "grad_gate", "[2, 5]", "[2, 6]"});
  expect_error_naming([&] { swiglu_backward(SwigluArgs{}, x, x, x, out, bad); },
                      {"swiglu_backward", "grad_up", "[2, 5]", "[2, 6]"});
}

}  // namespace
}  // namespace myriad
