// The CPU reference's view of a 16-bit operand: its exact f32 values (bf16 and f16 widen without
// rounding). Internal to src/ops: the dispatch points of matmul and grouped_matmul hand the CPU
// kernels f32 operands only. An f32 or undefined tensor is returned as it is, without a copy.
#pragma once

#include "myriad/core/tensor.h"

namespace myriad::ops {

inline Tensor as_f32_operand(const Tensor& t) { return !t.defined() || t.dtype() == DType::f32 ? t : t.to(DType::f32); }

}  // namespace myriad::ops
