// Elementwise plumbing the model needs besides its layers: scaled sums (residual adds, scaling),
// copies that convert dtype or gather a strided view, and zeroing.
//
//   add_forward:  out = alpha * a + beta * b    (b undefined: out = alpha * a, a scale)
//   add_backward: grad_a = alpha * grad_out, grad_b = beta * grad_out (`=`, or `+=` when
//                 args.accumulate_grads: a residual stream's gradient adds into what is there)
//   copy:         dst = src, converted to dst's dtype (f32, bf16, f16; round to nearest even)
//   zero:         every element of t = 0
//   fill:         every element of t = value (f32)
//   round_to_format: every element of the f32 tensor t = its value rounded to `format` (bf16 or
//                 f16, round to nearest even; f16 saturates to infinities; f32: unchanged) — the
//                 values a 16-bit tensor would hold, for compute precision emulated in f32
//
// Shapes: a, b, out, grad_out, grad_a, grad_b of one shape, contiguous f32 — but add_forward's b
// and out may be bf16 / f16 (mixed precision's residual stream: b read widened, exactly; a 16-bit
// out is the f32 sum rounded once, to nearest even; not both 16-bit); out may be a or b
// (in place, of its dtype), grad_a or grad_b may be grad_out itself or undefined (skipped). copy: src and dst of
// one shape; src any strides (the CPU reads any view; a device backend documents what it reads);
// dst any strides on the CPU, contiguous on a device. zero, fill: t contiguous.
#pragma once

#include "myriad/core/tensor.h"

namespace myriad {

struct AddArgs {
  float alpha = 1.0f;
  float beta = 1.0f;
  bool accumulate_grads = false;  // backward: grad_a += ..., grad_b += ... instead of =
};

void add_forward(const AddArgs& args, const Tensor& a, const Tensor& b, Tensor& out);  // (...) -> (...)
void add_backward(const AddArgs& args, const Tensor& grad_out, Tensor& grad_a, Tensor& grad_b);
void copy(const Tensor& src, Tensor& dst);
void zero(Tensor& t);
void fill(Tensor& t, float value);
void round_to_format(Tensor& t, DType format);

namespace cpu {
void add_forward(const AddArgs& args, const Tensor& a, const Tensor& b, Tensor& out);
void add_backward(const AddArgs& args, const Tensor& grad_out, Tensor& grad_a, Tensor& grad_b);
void copy(const Tensor& src, Tensor& dst);
void zero(Tensor& t);
void fill(Tensor& t, float value);
}  // namespace cpu

}  // namespace myriad
