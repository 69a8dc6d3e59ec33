// The heads views of packed rows that the model hands to attention, RoPE and copies (internal to
// the CUDA backend): a (B, T, W) tensor of rows seen as (B, T, H, D) "rows of heads" (strides
// [T*W, W, D, 1]) or, permuted, as (B, H, T, D) "heads of rows" (strides [T*W, D, W, 1]). The
// layout kernels (split_heads_f32 / merge_heads_f32) move between such views and contiguous
// (B, H, T, D) tensors given the row stride W.
#pragma once

#include <cstdint>
#include <optional>

#include "myriad/core/tensor.h"

namespace myriad::cuda {

// W when `t` is such a view (heads_major: (B, H, T, D) order; else (B, T, H, D)), else nullopt.
inline std::optional<std::int64_t> heads_row_stride(const Tensor& t, bool heads_major) {
  if (t.dim() != 4 || t.stride(3) != 1) return std::nullopt;
  const std::int64_t H = heads_major ? t.size(1) : t.size(2), T = heads_major ? t.size(2) : t.size(1);
  const std::int64_t head_stride = heads_major ? t.stride(1) : t.stride(2);
  const std::int64_t row_stride = heads_major ? t.stride(2) : t.stride(1);
  if ((H > 1 && head_stride != t.size(3)) || row_stride < H * t.size(3) ||
      (t.size(0) > 1 && t.stride(0) != T * row_stride)) {
    return std::nullopt;
  }
  return row_stride;
}

}  // namespace myriad::cuda
