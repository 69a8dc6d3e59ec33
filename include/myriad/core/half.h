// Conversions between float and the 16-bit float formats on the CPU.
//
// bf16: upper 16 bits of an IEEE float, rounded to nearest even; NaN stays NaN (quiet).
// f16:  IEEE 754 binary16, round to nearest even, with subnormals, infinities and NaN.
// Every conversion is inline and branch-free, so the loops over them vectorise.
// Values are carried as raw uint16 bit patterns so no compiler extension is needed.
#pragma once

#include <cstdint>
#include <cstring>

namespace myriad {

inline std::uint32_t float_bits(float value) {
  std::uint32_t bits;
  std::memcpy(&bits, &value, sizeof bits);
  return bits;
}

inline float bits_float(std::uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof value);
  return value;
}

// Branch-free (a select), so that loops over it vectorise.
inline std::uint16_t float_to_bf16(float value) {
  const std::uint32_t bits = float_bits(value);
  const std::uint32_t rounded = (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
  const std::uint32_t quiet_nan = (bits >> 16) | 0x0040u;
  return static_cast<std::uint16_t>((bits & 0x7fffffffu) > 0x7f800000u ? quiet_nan : rounded);
}

inline float bf16_to_float(std::uint16_t value) { return bits_float(static_cast<std::uint32_t>(value) << 16); }

// Branch-free as well (selects): normal values rebias the exponent and round the 13 dropped
// mantissa bits to nearest even, saturating to inf from 65520 on; below the smallest normal, adding
// 0.5f puts the f16 subnormal step at the float's last place, so the float addition rounds.
inline std::uint16_t float_to_f16(float value) {
  const std::uint32_t bits = float_bits(value);
  const std::uint32_t sign = (bits >> 16) & 0x8000u;
  const std::uint32_t f = bits & 0x7fffffffu;
  const std::uint32_t rebased = (f - 0x38000000u + 0x0fffu + ((f >> 13) & 1u)) >> 13;
  const std::uint32_t normal = rebased < 0x7c00u ? rebased : 0x7c00u;
  const std::uint32_t subnormal = float_bits(bits_float(f) + 0.5f) - 0x3f000000u;
  std::uint32_t out = f < 0x38800000u ? subnormal : normal;
  out = f > 0x7f800000u ? 0x7e00u : out;  // NaN stays NaN (quiet)
  return static_cast<std::uint16_t>(sign | out);
}

// The exponent and mantissa moved to a float's places and rebiased; an all-ones exponent (inf,
// NaN) rebiased once more to 255; zero and subnormals renormalised by one float subtraction.
inline float f16_to_float(std::uint16_t value) {
  const std::uint32_t sign = static_cast<std::uint32_t>(value & 0x8000u) << 16;
  const std::uint32_t shifted = static_cast<std::uint32_t>(value & 0x7fffu) << 13;
  const std::uint32_t exponent = shifted & 0x0f800000u;
  std::uint32_t out = shifted + 0x38000000u;
  out = exponent == 0x0f800000u ? out + 0x38000000u : out;
  const float widened = bits_float(exponent == 0 ? out + 0x00800000u : out);
  const float magnitude = exponent == 0 ? widened - bits_float(0x38800000u) : widened;
  return bits_float(float_bits(magnitude) | sign);
}

}  // namespace myriad
