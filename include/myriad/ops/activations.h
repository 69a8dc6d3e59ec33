// Elementwise activations of the MLP: GELU (GPT-2's tanh approximation) and SwiGLU.
//
//   gelu(x)         = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))
//   swiglu(g, u)    = silu(g) * u,   silu(g) = g * sigmoid(g) = g / (1 + exp(-g))
//
// Shapes: any shape (typically (B, T, 4C) for GELU and (B, T, F) for the gate / up halves of
// SwiGLU); every tensor has the same shape, is contiguous and f32 (on the CPU). The op is
// applied element by element, so an output may alias an input of the same call (in-place),
// e.g. gelu_forward(args, x, x) or gelu_backward(args, x, g, g). A forward's output may instead be
// bf16 / f16 (a GEMM operand kept in mixed precision): the f32 result rounded once, to nearest
// even; it then aliases no input. So may swiglu_backward's gradients (both of one dtype: mixed
// precision keeps them as the gate and up layers' GEMM operands). SwiGLU's gate and up may be
// bf16 / f16 too (mixed precision keeps the pre-activations in the format: read widened, exactly);
// its output and gradients are then of that format (a forward's output may be the gate's buffer;
// f32 gradients from a 16-bit gate are refused). Likewise GELU's x may be bf16 / f16 (a kept
// pre-activation, read widened): the forward's out and the backward's grad_x are then of that
// format (the f32 result rounded once); grad_out stays f32 and grad_x aliases nothing.
//
// Gradient contract: these ops have no parameters; activation grads are written (`=`), never
// accumulated. In swiglu_backward either gradient may be an undefined Tensor to skip it.
#pragma once

#include "myriad/core/tensor.h"

namespace myriad {

struct GeluArgs {};    // no options; kept so every op has the same argument-struct signature
struct SwigluArgs {};  // no options

void gelu_forward(const GeluArgs& args,
                  const Tensor& x,  // (...)
                  Tensor& out);     // (...) same shape as x
void gelu_backward(const GeluArgs& args,
                   const Tensor& x,         // (...)
                   const Tensor& grad_out,  // (...)
                   Tensor& grad_x);         // (...)  =

void swiglu_forward(const SwigluArgs& args,
                    const Tensor& gate,  // (...)
                    const Tensor& up,    // (...)
                    Tensor& out);        // (...)
void swiglu_backward(const SwigluArgs& args,
                     const Tensor& gate,      // (...)
                     const Tensor& up,        // (...)
                     const Tensor& grad_out,  // (...)
                     Tensor& grad_gate,       // (...)  =
                     Tensor& grad_up);        // (...)  =

namespace cpu {
void gelu_forward(const GeluArgs& args, const Tensor& x, Tensor& out);
void gelu_backward(const GeluArgs& args, const Tensor& x, const Tensor& grad_out, Tensor& grad_x);
void swiglu_forward(const SwigluArgs& args, const Tensor& gate, const Tensor& up, Tensor& out);
void swiglu_backward(const SwigluArgs& args, const Tensor& gate, const Tensor& up, const Tensor& grad_out,
                     Tensor& grad_gate, Tensor& grad_up);
}  // namespace cpu

}  // namespace myriad
