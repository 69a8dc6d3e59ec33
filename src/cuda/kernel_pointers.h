// The float pointer a kernel launch takes for an optional f32 tensor (internal to the CUDA
// backend): its device data, or nullptr when the tensor is undefined (no bias, no residual).
#pragma once

#include "myriad/core/tensor.h"

namespace myriad::cuda {

inline float* floats(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

}  // namespace myriad::cuda
