// The CPU reference's 16-bit outputs: a forward op whose output is kept in a GEMM operand format
// (bf16 / f16; mixed precision's saved activations) computes into an f32 tensor of the output's
// shape and rounds it into the output once, to nearest even (core/half.h) — the values of the f32
// op, rounded, as every backend gives them. An f32 output is computed in place. Internal to src/ops.
#pragma once

#include <utility>

#include "myriad/core/tensor.h"

namespace myriad::ops {

template <typename Compute>
void compute_into_output(Tensor& out, Compute&& compute) {
  if (out.dtype() == DType::f32) {
    std::forward<Compute>(compute)(out);
    return;
  }
  Tensor wide = Tensor::empty(out.shape());
  std::forward<Compute>(compute)(wide);
  out.copy_from(wide);
}

}  // namespace myriad::ops
