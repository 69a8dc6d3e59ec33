// vector_exp(x): e^x in float, written so that a loop calling it vectorises (libm's expf is a call
// the compiler cannot inline, and std::floor blocks GCC's vectoriser without -ffast-math).
// x = n ln2 + r with n = round(x / ln2) — rounded by adding and subtracting 1.5 * 2^23, whose float
// sum also holds n in its low mantissa bits — and |r| <= ln2 / 2 (Cody-Waite: ln2 in a high part
// exact in float and a low part); e^r by its degree-7 Taylor polynomial (truncation < 5e-9
// relative); 2^n by building the float's exponent bits (unsigned arithmetic: no undefined shift).
// Within 3 ulp of e^x over [-87.3, 88] (tests/ops/test_vector_exp.cpp); inputs are clamped to that
// range, so the result is never 0, a subnormal or inf (about 1.2e-38 below, 1.65e38 above), and
// NaN stays NaN. Used by the CPU activations (GELU, SiLU): internal to ops/cpu.
#pragma once

#include <algorithm>
#include <bit>
#include <cstdint>

namespace myriad::cpu {

inline float vector_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f, kLn2High = 0.693145751953125f, kLn2Low = 1.42860676533018e-06f;
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23
  const float clamped = std::min(std::max(x, -87.3f), 88.0f);
  const float shifted = clamped * kLog2e + kRound;
  const float n = shifted - kRound;
  const float r = (clamped - n * kLn2High) - n * kLn2Low;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const std::uint32_t exponent = std::bit_cast<std::uint32_t>(shifted) - std::bit_cast<std::uint32_t>(kRound) + 127u;
  const float scale = std::bit_cast<float>(exponent << 23);
  return x == x ? p * scale : x;  // NaN in, NaN out
}

}  // namespace myriad::cpu
