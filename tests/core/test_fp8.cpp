// FP8 E4M3 / E5M2 conversion against float64 references built from the formats' definitions:
// every code decoded, rounding to nearest even with saturation, NaN and infinities.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "myriad/core/fp8.h"
#include "myriad/core/philox.h"
#include "reference.h"

namespace myriad {
namespace {

struct Definition {
  const Fp8Format& format;
  int exponent_bits, mantissa_bits, bias;
  double max_finite;
  bool has_infinity;
};

const Definition kE4M3Definition{kE4M3, 4, 3, 7, 448.0, false};
const Definition kE5M2Definition{kE5M2, 5, 2, 15, 57344.0, true};

// The value of a non-negative code by the definition (NaN for the NaN codes, inf for E5M2's).
double decode_reference(unsigned code, const Definition& d) {
  const unsigned e = code >> d.mantissa_bits, m = code & ((1u << d.mantissa_bits) - 1u);
  const unsigned all_ones = (1u << d.exponent_bits) - 1u;
  if (d.has_infinity && e == all_ones) return m == 0 ? INFINITY : NAN;
  if (!d.has_infinity && e == all_ones && m == (1u << d.mantissa_bits) - 1u) return NAN;
  const double fraction = static_cast<double>(m) / std::ldexp(1.0, d.mantissa_bits);
  return e == 0 ? fraction * std::ldexp(1.0, 1 - d.bias) : (1.0 + fraction) * std::ldexp(1.0, int(e) - d.bias);
}

// Finite non-negative values with their codes, ascending.
std::vector<std::pair<double, unsigned>> finite_values(const Definition& d) {
  std::vector<std::pair<double, unsigned>> values;
  for (unsigned code = 0; code < 0x80u; ++code) {
    const double v = decode_reference(code, d);
    if (std::isfinite(v)) values.emplace_back(v, code);
  }
  std::sort(values.begin(), values.end());
  return values;
}

// The nearest finite value to x, ties to the even code, saturating at the largest finite.
double nearest_reference(double x, const std::vector<std::pair<double, unsigned>>& values) {
  const double magnitude = std::fabs(x);
  auto upper = std::lower_bound(values.begin(), values.end(), std::make_pair(magnitude, 0u));
  if (upper == values.end()) return std::copysign(values.back().first, x);
  auto lower = upper == values.begin() ? upper : upper - 1;
  const double below = magnitude - lower->first, above = upper->first - magnitude;
  const auto& chosen = below < above ? *lower : above < below ? *upper : ((lower->second & 1u) == 0 ? *lower : *upper);
  return std::copysign(chosen.first, x);
}

class Fp8Test : public ::testing::TestWithParam<const Definition*> {};

TEST_P(Fp8Test, EveryCodeDecodesByTheDefinitionAndRoundTrips) {
  const Definition& d = *GetParam();
  for (unsigned code = 0; code < 256u; ++code) {
    const double expected = (code & 0x80u ? -1.0 : 1.0) * decode_reference(code & 0x7fu, d);
    const float decoded = fp8_to_float(static_cast<std::uint8_t>(code), d.format);
    if (std::isnan(expected)) {
      ASSERT_TRUE(std::isnan(decoded)) << code;
      continue;
    }
    ASSERT_EQ(static_cast<double>(decoded), expected) << "code " << code;
    if (std::isfinite(expected)) ASSERT_EQ(float_to_fp8(decoded, d.format), code) << "round trip of code " << code;
  }
  EXPECT_EQ(static_cast<double>(finite_values(d).back().first), d.max_finite);
}

TEST_P(Fp8Test, EncodingRoundsToNearestEvenAndSaturates) {
  const Definition& d = *GetParam();
  const auto values = finite_values(d);
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  for (std::uint64_t i = 0; i < 40000; ++i) {
    // Log-uniform magnitudes from 2^-20 to 2^18: flushed to zero, subnormal, normal and saturated.
    const double exponent = -20.0 + 38.0 * philox_uniform(seed, 0, i);
    const double sign = philox_uniform(seed, 1, i) < 0.5 ? -1.0 : 1.0;
    const float x = static_cast<float>(sign * std::exp2(exponent));
    const double expected = nearest_reference(x, values);
    ASSERT_EQ(static_cast<double>(round_to_fp8(x, d.format)), expected) << "x = " << x;
    ASSERT_EQ(static_cast<double>(fp8_to_float(float_to_fp8(x, d.format), d.format)), expected) << "x = " << x;
  }
  // Exact midpoints between neighbours go to the even code.
  for (std::size_t j = 0; j + 1 < values.size(); ++j) {
    const float mid = static_cast<float>((values[j].first + values[j + 1].first) / 2);
    const double even = (values[j].second & 1u) == 0 ? values[j].first : values[j + 1].first;
    ASSERT_EQ(static_cast<double>(round_to_fp8(mid, d.format)), even) << "midpoint " << mid;
  }
}

TEST_P(Fp8Test, InfinitySaturatesAndNanStaysNan) {
  const Definition& d = *GetParam();
  EXPECT_EQ(static_cast<double>(round_to_fp8(INFINITY, d.format)), d.max_finite);
  EXPECT_EQ(static_cast<double>(round_to_fp8(-INFINITY, d.format)), -d.max_finite);
  EXPECT_EQ(static_cast<double>(round_to_fp8(1e30f, d.format)), d.max_finite);
  EXPECT_TRUE(std::isnan(fp8_to_float(float_to_fp8(NAN, d.format), d.format)));
  EXPECT_EQ(float_to_fp8(-0.0f, d.format), 0x80u);
}

INSTANTIATE_TEST_SUITE_P(Formats, Fp8Test, ::testing::Values(&kE4M3Definition, &kE5M2Definition),
                         [](const auto& info) { return info.param == &kE4M3Definition ? "E4M3" : "E5M2"; });

TEST(Fp8, FormatOfTheDtypes) {
  EXPECT_EQ(&fp8_format(DType::f8e4m3), &kE4M3);
  EXPECT_EQ(&fp8_format(DType::f8e5m2), &kE5M2);
  EXPECT_THROW((void)fp8_format(DType::bf16), Error);
  EXPECT_EQ(parse_dtype("f8e5m2"), DType::f8e5m2);
  EXPECT_EQ(dtype_size(DType::f8e4m3), 1u);
}

}  // namespace
}  // namespace myriad
