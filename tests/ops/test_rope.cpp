// rope against a float64 rotate-half reference (several shapes, position offsets, theta, strided
// and in-place use), its backward against central finite differences, and argument errors.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <string>

#include "myriad/ops/rope.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using testing::to_f64;

struct RopeCase {
  std::int64_t B, T, H, D;
  double theta;
  std::int64_t offset;
  bool permuted;  // x is a (B, H, T, D) tensor viewed as (B, T, H, D)
};

// out = rotate-half RoPE of x (B, T, H, D) given as flat row-major float64.
std::vector<double> reference_rope(const RopeCase& c, const std::vector<double>& x) {
  std::vector<double> out(x.size());
  const std::int64_t half = c.D / 2;
  for (std::int64_t b = 0; b < c.B; ++b)
    for (std::int64_t t = 0; t < c.T; ++t)
      for (std::int64_t h = 0; h < c.H; ++h) {
        const std::int64_t base = ((b * c.T + t) * c.H + h) * c.D;
        for (std::int64_t i = 0; i < half; ++i) {
          const double angle = static_cast<double>(c.offset + t) * std::pow(c.theta, -2.0 * i / c.D);
          const double x1 = x[base + i], x2 = x[base + i + half];
          out[base + i] = x1 * std::cos(angle) - x2 * std::sin(angle);
          out[base + i + half] = x2 * std::cos(angle) + x1 * std::sin(angle);
        }
      }
  return out;
}

Tensor make_input(const RopeCase& c, std::uint64_t seed, std::uint64_t stream) {
  if (!c.permuted) return testing::random_tensor({c.B, c.T, c.H, c.D}, seed, stream);
  return testing::random_tensor({c.B, c.H, c.T, c.D}, seed, stream).permute({0, 2, 1, 3});
}

class RopeReference : public ::testing::TestWithParam<RopeCase> {};

TEST_P(RopeReference, ForwardAndBackwardMatchFloat64) {
  const RopeCase c = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  RopeArgs args{.theta = c.theta, .position_offset = c.offset};
  Tensor x = make_input(c, seed, 0);
  Tensor out = Tensor::empty(x.shape());
  rope_forward(args, x, out);
  std::vector<double> xv = to_f64(x);
  // |x| <= 1; float32 cos / sin and two products: a few ulps.
  testing::expect_close(out, reference_rope(c, xv), 1e-6, 1e-6, "rope out");

  // In place on a copy with the same layout.
  Tensor inplace = make_input(c, seed, 0);
  rope_forward(args, inplace, inplace);
  testing::expect_close(inplace, to_f64(out), 0, 0, "rope in place");

  Tensor r = make_input(c, seed, 1);
  std::vector<double> rv = to_f64(r);
  Tensor grad_x = Tensor::empty(x.shape());
  rope_backward(args, r, grad_x);
  auto loss = [&](const std::vector<double>& xs) { return testing::dot(reference_rope(c, xs), rv); };
  testing::expect_close(grad_x, testing::numerical_gradient(loss, xv), 1e-6, 1e-6, "rope grad_x");
  rope_backward(args, r, r);  // in place
  testing::expect_close(r, to_f64(grad_x), 0, 0, "rope backward in place");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, RopeReference,
    ::testing::Values(RopeCase{1, 1, 1, 2, 10000.0, 0, false}, RopeCase{2, 5, 3, 8, 10000.0, 0, false},
                      RopeCase{1, 7, 2, 6, 500000.0, 3, false}, RopeCase{2, 4, 3, 16, 10000.0, 4093, false},
                      RopeCase{2, 5, 3, 8, 10000.0, 1, true}, RopeCase{1, 3, 4, 64, 10000.0, 0, true}));

TEST(Rope, BackwardInvertsForwardAtLargePositions) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Tensor x = testing::random_tensor({1, 16, 2, 128}, seed, 0);
  RopeArgs args{.position_offset = 100000};
  Tensor y = Tensor::empty(x.shape()), back = Tensor::empty(x.shape());
  rope_forward(args, x, y);
  rope_backward(args, y, back);
  testing::expect_close(back, to_f64(x), 1e-6, 1e-6, "rotate back");
}

TEST(Rope, BadArgumentsNameTheOpAndShapes) {
  RopeArgs args;
  Tensor odd = Tensor::zeros({1, 2, 3, 5});
  testing::expect_error_naming([&] { rope_forward(args, odd, odd); }, {"rope_forward", "even", "[1, 2, 3, 5]"});
  Tensor x = Tensor::zeros({1, 2, 3, 4}), other = Tensor::zeros({1, 2, 4, 4});
  testing::expect_error_naming([&] { rope_forward(args, x, other); },
                               {"rope_forward", "'out'", "[1, 2, 4, 4]", "[1, 2, 3, 4]"});
  testing::expect_error_naming([&] { rope_backward(args, x, other); },
                               {"rope_backward", "'grad_x'", "[1, 2, 4, 4]", "[1, 2, 3, 4]"});
  Tensor wide = Tensor::zeros({1, 2, 3, 8});
  Tensor strided = Tensor::from_storage(wide.storage(), {1, 2, 3, 4}, {48, 24, 8, 2}, 0, DType::f32);
  testing::expect_error_naming([&] { rope_forward(args, strided, x); },
                               {"rope_forward", "'x'", "unit stride", "[48, 24, 8, 2]"});
  Tensor ints = Tensor::zeros({1, 2, 3, 4}, DType::i32);
  testing::expect_error_naming([&] { rope_forward(args, ints, x); }, {"rope_forward", "'x'", "i32"});
  Tensor three_d = Tensor::zeros({2, 3, 4});
  testing::expect_error_naming([&] { rope_forward(args, three_d, three_d); },
                               {"rope_forward", "[2, 3, 4]", "4 dimensions"});
  RopeArgs bad_theta{.theta = 0.0};
  testing::expect_error_naming([&] { rope_forward(bad_theta, x, x); }, {"rope_forward", "theta"});
}

}  // namespace
}  // namespace myriad
