// round_to_precision: elementwise round trips through the 16-bit formats of core/half.h.
#include "myriad/core/precision.h"

#include "myriad/core/error.h"
#include "myriad/core/half.h"

namespace myriad {

void round_to_precision(Tensor& t, DType format) {
  MYRIAD_CHECK(format == DType::f32 || format == DType::bf16 || format == DType::f16,
               "round_to_precision: format must be f32, bf16 or f16, got " << dtype_name(format));
  if (format == DType::f32 || !t.defined()) return;
  MYRIAD_CHECK(t.dtype() == DType::f32 && t.is_contiguous() && t.device().is_cpu(),
               "round_to_precision: expected a contiguous f32 CPU tensor, got " << t.describe());
  float* data = t.data<float>();
  const std::int64_t n = t.numel();
  // NOLINTNEXTLINE(bugprone-branch-clone): bf16 vs f16; clang-tidy 14 compares omp loops without their bodies
  if (format == DType::bf16) {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (std::int64_t i = 0; i < n; ++i) data[i] = bf16_to_float(float_to_bf16(data[i]));
  } else {
#pragma omp parallel for schedule(static) if (n > (1 << 16))
    for (std::int64_t i = 0; i < n; ++i) data[i] = f16_to_float(float_to_f16(data[i]));
  }
}

}  // namespace myriad
