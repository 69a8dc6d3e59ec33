// Rotary position embedding (RoPE), LLaMA / Hugging Face "rotate half" convention.
//
// For x (B, T, H, D) with D even, element i < D/2 of each head vector is paired with i + D/2 and
// the pair is rotated by angle(t, i) = (position_offset + t) * theta^(-2i / D):
//   out[.., i]       = x[.., i] cos(angle) - x[.., i + D/2] sin(angle)
//   out[.., i + D/2] = x[.., i + D/2] cos(angle) + x[.., i] sin(angle)
// Angles and their cos / sin are computed in float64 once per (t, i) and rounded to float, so
// large positions keep their accuracy.
//
// Shapes: x, out, grad_out, grad_x (B, T, H, D); any strides with unit stride in D. out may be x
// itself (in place), and grad_x may be grad_out; partial overlaps are not allowed. The forward's
// out may be bf16 / f16 (mixed precision keeps the rotated q, k for 16-bit attention products): the
// f32 rotation rounded once, to nearest even; so may the backward's grad_out and grad_x (mixed
// precision keeps the attention's q, k gradients in the format: widened exactly, rotated in f32,
// rounded once).
//
// Gradient contract: x is an activation, so rope_backward writes grad_x (`=`): the rotation by
// -angle (the transpose of the forward rotation).
#pragma once

#include <cstdint>

#include "myriad/core/tensor.h"

namespace myriad {

struct RopeArgs {
  double theta = 10000.0;            // frequency base
  std::int64_t position_offset = 0;  // position of t = 0 (e.g. tokens already in a KV cache)
};

void rope_forward(const RopeArgs& args,
                  const Tensor& x,  // (B, T, H, D)
                  Tensor& out);     // (B, T, H, D), may be x
void rope_backward(const RopeArgs& args,
                   const Tensor& grad_out,  // (B, T, H, D)
                   Tensor& grad_x);         // (B, T, H, D) written, may be grad_out

namespace cpu {
void rope_forward(const RopeArgs& args, const Tensor& x, Tensor& out);
void rope_backward(const RopeArgs& args, const Tensor& grad_out, Tensor& grad_x);
}  // namespace cpu

}  // namespace myriad
