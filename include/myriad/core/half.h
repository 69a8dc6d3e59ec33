// Conversions between float and the 16-bit float formats on the CPU.
//
// bf16: upper 16 bits of an IEEE float, rounded to nearest even; NaN stays NaN (quiet).
// f16:  IEEE 754 binary16, round to nearest even, with subnormals, infinities and NaN.
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

std::uint16_t float_to_f16(float value);
float f16_to_float(std::uint16_t value);

}  // namespace myriad
