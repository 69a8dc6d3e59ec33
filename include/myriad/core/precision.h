// Compute precision on the CPU: rounding f32 tensors to the values a bf16 or fp16 tensor holds.
//
// round_to_precision(t, bf16 | f16) replaces every element of the f32 tensor `t` by the nearest
// value representable in that format (round to nearest even, core/half.h), so f32 arithmetic on
// the result reproduces what a low-precision tensor would feed the next operation; f16 also
// saturates like the format does: magnitudes above 65504 become infinities (an overflow a loss
// scaler must catch), tiny ones subnormals or zero. f32 leaves `t` unchanged.
#pragma once

#include "myriad/core/tensor.h"

namespace myriad {

void round_to_precision(Tensor& t, DType format);

}  // namespace myriad
