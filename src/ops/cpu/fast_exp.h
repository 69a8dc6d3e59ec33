// fast_exp — a branch-free float exp that the compiler vectorises inside plain loops.
//
// exp(x) = 2^n * exp(r) with n = round(x / ln 2) and r = x - n ln 2 in [-ln2/2, ln2/2] (Cody-Waite:
// ln 2 split into a short high part, exact when multiplied by n, and a low correction). exp(r) is
// the degree-7 Taylor polynomial (truncation error < 6e-9 on that interval), so the result is
// within ~2e-7 relative of exp(x) for x in [-87.3, 88]. Inputs above 88 are clamped to 88; inputs
// below -87.3 (including -inf) give exactly 0, so masked scores vanish (the true value there is
// below the smallest normal float anyway). NaN inputs give NaN through the polynomial.
//
// Only multiplies, adds and integer bit operations: no calls, no branches, so `for (i) y[i] =
// fast_exp(x[i])` vectorises at -O3 without -ffast-math, and results are the same on every thread.
#pragma once

#include <bit>
#include <cstdint>

namespace myriad::cpu {

inline float fast_exp(float x) {
  constexpr float kLog2e = 1.44269504088896341f;
  constexpr float kLn2Hi = 0.693145751953125f;         // low 9 mantissa bits zero: n * kLn2Hi is exact
  constexpr float kLn2Lo = 1.428606765330187045e-06f;  // ln 2 - kLn2Hi
  constexpr float kRoundMagic = 12582912.0f;           // 1.5 * 2^23: adding it rounds to an integer
  constexpr float kLow = -87.3f;                       // exp(kLow) ~ 1.2e-38, the smallest normal
  constexpr float kHigh = 88.0f;
  // Clamp and underflow with integer masks rather than float selects: under the default
  // -ftrapping-math GCC turns float selects into branches and then refuses to vectorise.
  const std::int32_t below = -static_cast<std::int32_t>(x < kLow);  // all ones when x < kLow
  const std::int32_t above = -static_cast<std::int32_t>(x > kHigh);
  const float xc =
      std::bit_cast<float>((std::bit_cast<std::int32_t>(x) & ~(below | above)) |
                           (std::bit_cast<std::int32_t>(kLow) & below) | (std::bit_cast<std::int32_t>(kHigh) & above));
  const float shifted = xc * kLog2e + kRoundMagic;
  const float n = shifted - kRoundMagic;  // round-to-nearest integer in [-126, 127]
  const float r = (xc - n * kLn2Hi) - n * kLn2Lo;
  float p = 1.0f / 5040.0f;
  p = p * r + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  // 2^n: the low mantissa bits of `shifted` hold n (two's complement); move them into the exponent.
  const std::int32_t n_int = std::bit_cast<std::int32_t>(shifted) - std::bit_cast<std::int32_t>(kRoundMagic);
  const float scale = std::bit_cast<float>((n_int + 127) << 23);
  return std::bit_cast<float>(std::bit_cast<std::int32_t>(p * scale) & ~below);
}

}  // namespace myriad::cpu
