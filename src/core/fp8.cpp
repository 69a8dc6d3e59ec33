// FP8 E4M3 / E5M2 <-> float on the CPU: round to nearest even on the float's bits (normal range)
// or on multiples of the subnormal step (below the smallest normal), then saturation.
#include "myriad/core/fp8.h"

#include <cmath>

#include "myriad/core/error.h"
#include "myriad/core/half.h"

namespace myriad {

const Fp8Format& fp8_format(DType dtype) {
  if (dtype == DType::f8e4m3) return kE4M3;
  if (dtype == DType::f8e5m2) return kE5M2;
  MYRIAD_THROW("fp8_format: " << dtype_name(dtype) << " is not an FP8 dtype (f8e4m3 or f8e5m2)");
}

namespace {

int min_normal_exponent(const Fp8Format& f) { return 1 - f.bias; }

// |value| rounded to the format's precision (finite, not yet saturated), as a float.
float round_magnitude(float magnitude, const Fp8Format& f) {
  const float min_normal = std::ldexp(1.0f, min_normal_exponent(f));
  if (magnitude < min_normal) {
    // Subnormal range: multiples of the step 2^(emin - M); the division by a power of two is exact.
    const float step = std::ldexp(1.0f, min_normal_exponent(f) - f.mantissa_bits);
    return std::nearbyint(magnitude / step) * step;  // the default rounding mode: to nearest even
  }
  // Normal range: keep M of the float's 23 mantissa bits, rounding the dropped ones to nearest even.
  const int dropped = 23 - f.mantissa_bits;
  const std::uint32_t bits = float_bits(magnitude);
  const std::uint32_t half = (1u << (dropped - 1)) - 1u + ((bits >> dropped) & 1u);
  return bits_float(((bits + half) >> dropped) << dropped);
}

}  // namespace

float round_to_fp8(float value, const Fp8Format& format) {
  if (std::isnan(value)) return value;
  const float magnitude = std::min(round_magnitude(std::min(std::fabs(value), 3.0e38f), format), format.max_finite);
  return std::copysign(magnitude, value);
}

std::uint8_t float_to_fp8(float value, const Fp8Format& f) {
  const std::uint8_t sign = std::signbit(value) ? 0x80u : 0x00u;
  if (std::isnan(value)) return static_cast<std::uint8_t>(sign | 0x7fu);
  const float magnitude = std::fabs(round_to_fp8(value, f));
  const int emin = min_normal_exponent(f);
  if (magnitude < std::ldexp(1.0f, emin)) {  // subnormal or zero: the count of steps
    return static_cast<std::uint8_t>(sign | static_cast<std::uint8_t>(std::ldexp(magnitude, f.mantissa_bits - emin)));
  }
  const std::uint32_t bits = float_bits(magnitude);
  const int exponent = static_cast<int>(bits >> 23) - 127;
  const std::uint32_t mantissa = (bits >> (23 - f.mantissa_bits)) & ((1u << f.mantissa_bits) - 1u);
  return static_cast<std::uint8_t>(sign | (static_cast<std::uint32_t>(exponent + f.bias) << f.mantissa_bits) |
                                   mantissa);
}

float fp8_to_float(std::uint8_t code, const Fp8Format& f) {
  const bool negative = (code & 0x80u) != 0;
  const int exponent_field = (code & 0x7fu) >> f.mantissa_bits;
  const int mantissa = code & ((1 << f.mantissa_bits) - 1);
  const int all_ones = (1 << f.exponent_bits) - 1;
  float magnitude;
  if (f.has_infinity && exponent_field == all_ones) {
    magnitude = mantissa == 0 ? INFINITY : NAN;
  } else if (!f.has_infinity && exponent_field == all_ones && mantissa == (1 << f.mantissa_bits) - 1) {
    magnitude = NAN;
  } else if (exponent_field == 0) {
    magnitude = std::ldexp(static_cast<float>(mantissa), min_normal_exponent(f) - f.mantissa_bits);
  } else {
    magnitude = std::ldexp(1.0f + std::ldexp(static_cast<float>(mantissa), -f.mantissa_bits), exponent_field - f.bias);
  }
  return negative ? -magnitude : magnitude;
}

}  // namespace myriad
