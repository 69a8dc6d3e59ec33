// bf16 / f16 conversion against exact float64 references: rounding to nearest even,
// subnormals, overflow to infinity and NaN.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "myriad/core/half.h"
#include "myriad/core/philox.h"
#include "reference.h"

namespace myriad {
namespace {

// The f16 value nearest to x (ties to even): every finite positive pattern is decoded once and
// the neighbours of |x| are found by bisection.
double nearest_f16_reference(double x, const std::vector<double>& sorted_positive) {
  double magnitude = std::fabs(x);
  if (magnitude >= 65520.0) return std::copysign(INFINITY, x);  // 65504 + half ulp rounds to inf
  auto it = std::lower_bound(sorted_positive.begin(), sorted_positive.end(), magnitude);
  if (it == sorted_positive.end()) return std::copysign(sorted_positive.back(), x);  // (65504, 65520): the max
  double upper = *it;
  double lower = it == sorted_positive.begin() ? upper : *(it - 1);
  double chosen;
  if (magnitude - lower < upper - magnitude)
    chosen = lower;
  else if (upper - magnitude < magnitude - lower)
    chosen = upper;
  else
    chosen = (float_to_f16(static_cast<float>(lower)) & 1u) == 0 ? lower : upper;
  return std::copysign(chosen, x);
}

TEST(Half, F16DecodeMatchesDefinition) {
  for (std::uint32_t bits = 0; bits < 0x7c00u; ++bits) {
    std::uint32_t e = bits >> 10, m = bits & 0x3ffu;
    double expected =
        e == 0 ? m * std::ldexp(1.0, -24) : (1.0 + m / 1024.0) * std::ldexp(1.0, static_cast<int>(e) - 15);
    ASSERT_EQ(static_cast<double>(f16_to_float(static_cast<std::uint16_t>(bits))), expected) << bits;
    ASSERT_EQ(float_to_f16(f16_to_float(static_cast<std::uint16_t>(bits))), bits) << "round trip " << bits;
  }
  EXPECT_TRUE(std::isinf(f16_to_float(0x7c00u)));
  EXPECT_TRUE(std::isnan(f16_to_float(0x7e00u)));
}

TEST(Half, F16EncodeRoundsToNearestEven) {
  std::vector<double> positive;
  for (std::uint32_t bits = 0; bits < 0x7c00u; ++bits)
    positive.push_back(f16_to_float(static_cast<std::uint16_t>(bits)));
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  for (std::uint64_t i = 0; i < 20000; ++i) {
    // log-uniform magnitudes from 2^-28 to 2^17 cover zero-rounding, subnormals, normals, overflow.
    double exponent = -28.0 + 45.0 * philox_uniform(seed, 0, i);
    double sign = philox_uniform(seed, 1, i) < 0.5 ? -1.0 : 1.0;
    float x = static_cast<float>(sign * std::exp2(exponent));
    double expected = nearest_f16_reference(x, positive);
    ASSERT_EQ(static_cast<double>(f16_to_float(float_to_f16(x))), expected) << "x = " << x;
  }
  EXPECT_TRUE(std::isnan(f16_to_float(float_to_f16(NAN))));
}

TEST(Half, Bf16RoundsToNearestEven) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  for (std::uint64_t i = 0; i < 20000; ++i) {
    float x = (philox_uniform(seed, 0, i) - 0.5f) * std::exp2(static_cast<float>(i % 60) - 30.0f);
    double lower_bits_value = bits_float(float_bits(x) & 0xffff0000u);
    double upper_bits_value = bits_float((float_bits(x) & 0xffff0000u) + 0x10000u);
    double got = bf16_to_float(float_to_bf16(x));
    double dl = std::fabs(x - lower_bits_value), du = std::fabs(upper_bits_value - x);
    if (dl < du)
      ASSERT_EQ(got, lower_bits_value) << x;
    else if (du < dl)
      ASSERT_EQ(got, upper_bits_value) << x;
    else
      ASSERT_EQ(float_to_bf16(x) & 1u, 0u) << x;
  }
  EXPECT_TRUE(std::isnan(bf16_to_float(float_to_bf16(NAN))));
  EXPECT_TRUE(std::isinf(bf16_to_float(float_to_bf16(INFINITY))));
}

}  // namespace
}  // namespace myriad
