// gelu_math — the tanh GELU's value and gradient per element, and the sigmoid they use, shared
// by the GELU ops, SwiGLU and the fused linear + GELU passes so all compute the same function.
// GELU is computed as x * sigmoid(2u), u = sqrt(2/pi) (x + 0.044715 x^3) — the same function as
// 0.5 x (1 + tanh u), without the cancellation of 1 + tanh u for negative x — with the sigmoid
// through fast_exp (branch-free, so loops over these vectorise). Internal to src/ops/cpu.
#pragma once

#include "fast_exp.h"

namespace myriad::cpu {

inline constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)
inline constexpr float kGeluCubic = 0.044715f;

// 1 / (1 + e^-v): fast_exp clamps instead of overflowing to inf, so no NaN from inf / inf.
inline float fast_sigmoid(float v) { return 1.0f / (1.0f + fast_exp(-v)); }
// 2u(x), the sigmoid's argument.
inline float gelu_inner_twice(float v) { return 2.0f * kGeluScale * (v + kGeluCubic * v * v * v); }

inline float gelu_value(float v) { return v * fast_sigmoid(gelu_inner_twice(v)); }

// d gelu(x) / dx * dy: d/dx x s(2u) = s + x s (1 - s) 2u'(x).
inline float gelu_gradient(float v, float dy) {
  const float s = fast_sigmoid(gelu_inner_twice(v));
  const float d_twice_inner = 2.0f * kGeluScale * (1.0f + 3.0f * kGeluCubic * v * v);
  return (s + v * s * (1.0f - s) * d_twice_inner) * dy;
}

}  // namespace myriad::cpu
