// IEEE binary16 <-> binary32 conversion with round-to-nearest-even (bit manipulation only).
#include "myriad/core/half.h"

namespace myriad {

std::uint16_t float_to_f16(float value) {
  std::uint32_t bits = float_bits(value);
  std::uint32_t sign = (bits >> 16) & 0x8000u;
  std::uint32_t abs_bits = bits & 0x7fffffffu;
  if (abs_bits > 0x7f800000u) return static_cast<std::uint16_t>(sign | 0x7e00u);   // NaN
  if (abs_bits >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);  // overflow -> inf
  if (abs_bits < 0x38800000u) {
    // Result is subnormal in f16 (or zero): shift mantissa with implicit bit, round to nearest even.
    if (abs_bits < 0x33000000u) return static_cast<std::uint16_t>(sign);  // below half the smallest subnormal
    std::uint32_t exponent = abs_bits >> 23;
    std::uint32_t mantissa = (abs_bits & 0x007fffffu) | 0x00800000u;
    // value = mantissa * 2^(exponent - 150) = h * 2^-24  =>  h = mantissa >> (126 - exponent).
    std::uint32_t shift = 126u - exponent;
    std::uint32_t half_mantissa = mantissa >> shift;
    std::uint32_t remainder = mantissa & ((1u << shift) - 1u);
    std::uint32_t halfway = 1u << (shift - 1u);
    if (remainder > halfway || (remainder == halfway && (half_mantissa & 1u))) half_mantissa += 1u;
    return static_cast<std::uint16_t>(sign | half_mantissa);
  }
  // Normal: rebias exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest even.
  std::uint32_t rebased = abs_bits - 0x38000000u;
  std::uint32_t rounding = 0x0fffu + ((rebased >> 13) & 1u);
  return static_cast<std::uint16_t>(sign | ((rebased + rounding) >> 13));
}

float f16_to_float(std::uint16_t value) {
  std::uint32_t sign = static_cast<std::uint32_t>(value & 0x8000u) << 16;
  std::uint32_t exponent = (value >> 10) & 0x1fu;
  std::uint32_t mantissa = value & 0x3ffu;
  if (exponent == 0x1fu) return bits_float(sign | 0x7f800000u | (mantissa << 13));  // inf / NaN
  if (exponent == 0) {
    if (mantissa == 0) return bits_float(sign);
    // Subnormal: value = mantissa * 2^-24.
    float magnitude = static_cast<float>(mantissa) * 5.9604644775390625e-8f;
    return sign ? -magnitude : magnitude;
  }
  return bits_float(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

}  // namespace myriad
