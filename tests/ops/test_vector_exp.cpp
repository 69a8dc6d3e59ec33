// vector_exp (src/ops/cpu/vector_exp.h, the CPU activations' exponential) against float64 exp:
// within 3 ulp over its range on fresh random inputs and at the range's edges, clamped outside
// it (never 0, inf or a subnormal), NaN kept.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>

#include "../../src/ops/cpu/vector_exp.h"
#include "reference.h"

namespace myriad::cpu {
namespace {

double ulps(float actual, double expected) {
  const double ulp = std::nextafter(static_cast<float>(expected), std::numeric_limits<float>::infinity()) -
                     static_cast<float>(expected);
  return std::abs(actual - expected) / ulp;
}

TEST(VectorExp, WithinThreeUlpOfFloat64) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  std::mt19937_64 draw(seed);
  std::uniform_real_distribution<float> range(-87.3f, 88.0f), near_zero(-1.0f, 1.0f);
  double worst = 0.0;
  for (int i = 0; i < 200000; ++i) {
    const float x = i % 2 == 0 ? range(draw) : near_zero(draw);
    worst = std::max(worst, ulps(vector_exp(x), std::exp(static_cast<double>(x))));
  }
  for (const float x : {-87.3f, 88.0f, 0.0f, -0.0f, 1e-8f, -1e-8f, 0.34657359f, -0.34657359f, 1.0f, -1.0f})
    worst = std::max(worst, ulps(vector_exp(x), std::exp(static_cast<double>(x))));
  EXPECT_LE(worst, 3.0);
}

TEST(VectorExp, ClampsOutsideItsRangeAndKeepsNaN) {
  EXPECT_EQ(vector_exp(-1000.0f), vector_exp(-87.3f));
  EXPECT_GT(vector_exp(-1000.0f), 0.0f);
  EXPECT_TRUE(std::isnormal(vector_exp(-std::numeric_limits<float>::infinity())));
  EXPECT_EQ(vector_exp(1000.0f), vector_exp(88.0f));
  EXPECT_TRUE(std::isfinite(vector_exp(std::numeric_limits<float>::infinity())));
  EXPECT_TRUE(std::isnan(vector_exp(std::numeric_limits<float>::quiet_NaN())));
}

}  // namespace
}  // namespace myriad::cpu
