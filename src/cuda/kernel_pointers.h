// The pointers kernel launches take (internal to the CUDA backend): `floats` for an optional f32
// tensor — its device data, or nullptr when the tensor is undefined (no bias, no residual);
// `with_output_pointer` for an output that is f32 or a 16-bit GEMM operand format — the launch
// called with float*, __nv_bfloat16* or __half* (the launchers' overloads), another dtype refused.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <type_traits>

#include "myriad/core/error.h"
#include "myriad/core/tensor.h"

namespace myriad::cuda {

inline float* floats(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

template <typename Launch>
void with_output_pointer(const char* op, const Tensor& out, Launch&& launch) {
  switch (out.dtype()) {
    case DType::f32:
      launch(out.data<float>());
      return;
    case DType::bf16:
      launch(static_cast<__nv_bfloat16*>(out.raw_data()));
      return;
    case DType::f16:
      launch(static_cast<__half*>(out.raw_data()));
      return;
    default:
      MYRIAD_THROW(op << ": output " << out.describe() << " must be f32, bf16 or f16");
  }
}

// The same for an input: launch called with const float*, const __nv_bfloat16* or const __half*.
template <typename Launch>
void with_input_pointer(const char* op, const Tensor& in, Launch&& launch) {
  switch (in.dtype()) {
    case DType::f32:
      launch(static_cast<const float*>(in.data<float>()));
      return;
    case DType::bf16:
      launch(static_cast<const __nv_bfloat16*>(in.raw_data()));
      return;
    case DType::f16:
      launch(static_cast<const __half*>(in.raw_data()));
      return;
    default:
      MYRIAD_THROW(op << ": input " << in.describe() << " must be f32, bf16 or f16");
  }
}

// A launcher pair of pointers whose pointees are f32 and anything, or one 16-bit format twice
// (bf16 with f16 has no launcher; the dispatch points refuse it).
template <typename A, typename B>
constexpr bool kOne16BitFormat =
    std::is_same_v<std::remove_cv_t<A>, float> || std::is_same_v<std::remove_cv_t<B>, float> ||
    std::is_same_v<std::remove_cv_t<A>, std::remove_cv_t<B>>;

// An input and an output that are each f32 or 16-bit (mixed precision's residual stream, kept
// pre-activations): launch(in pointer, out pointer) for the pairs of kOne16BitFormat; two different
// 16-bit formats throw (the dispatch points refused them already). An op that takes fewer pairs
// narrows them with `if constexpr` on the pointee types inside its launch.
template <typename Launch>
void with_input_and_output_pointers(const char* op, const Tensor& in, const Tensor& out, Launch&& launch) {
  with_input_pointer(op, in, [&](const auto* in_data) {
    with_output_pointer(op, out, [&](auto* out_data) {
      using In = std::remove_pointer_t<decltype(in_data)>;
      using Out = std::remove_pointer_t<decltype(out_data)>;
      if constexpr (kOne16BitFormat<In, Out>) {
        launch(in_data, out_data);
      } else {
        MYRIAD_THROW(op << ": " << in.describe() << " and " << out.describe() << " are two 16-bit formats");
      }
    });
  });
}

}  // namespace myriad::cuda
