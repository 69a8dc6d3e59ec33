// The heads views of packed rows that the model hands to attention, RoPE and copies (internal to
// the CUDA backend): a (B, T, W) tensor of rows seen as (B, T, H, D) "rows of heads" (strides
// [T*W, W, D, 1]) or, permuted, as (B, H, T, D) "heads of rows" (strides [T*W, D, W, 1]). The
// layout kernels (split_heads_f32 / merge_heads_f32, and _16 for bf16 / f16) move between such views and contiguous
// (B, H, T, D) tensors given the row stride W. A view of some of the rows (a chunk of the
// sequence: ring attention's halves, RoPE per chunk) keeps the whole sequence's batch stride:
// split_heads_view / merge_heads_view then launch once per batch element.
#pragma once

#include <cstdint>
#include <optional>

#include "myriad/core/tensor.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {

// W when `t` is such a view (heads_major: (B, H, T, D) order; else (B, T, H, D)), else nullopt.
inline std::optional<std::int64_t> heads_row_stride(const Tensor& t, bool heads_major) {
  if (t.dim() != 4 || t.stride(3) != 1) return std::nullopt;
  const std::int64_t H = heads_major ? t.size(1) : t.size(2), T = heads_major ? t.size(2) : t.size(1);
  const std::int64_t head_stride = heads_major ? t.stride(1) : t.stride(2);
  const std::int64_t row_stride = heads_major ? t.stride(2) : t.stride(1);
  if ((H > 1 && head_stride != t.size(3)) || row_stride < H * t.size(3) ||
      (t.size(0) > 1 && t.stride(0) < T * row_stride)) {
    return std::nullopt;
  }
  return row_stride;
}

// The layout kernels by element: float (split_heads_f32 / merge_heads_f32) or 16-bit values.
inline void split_heads(const float* src, std::int64_t row_stride, float* dst, std::int64_t B, std::int64_t T,
                        std::int64_t H, std::int64_t D, cudaStream_t stream) {
  split_heads_f32(src, row_stride, dst, B, T, H, D, stream);
}
inline void split_heads(const std::uint16_t* src, std::int64_t row_stride, std::uint16_t* dst, std::int64_t B,
                        std::int64_t T, std::int64_t H, std::int64_t D, cudaStream_t stream) {
  split_heads_16(src, row_stride, dst, B, T, H, D, stream);
}
inline void merge_heads(const float* src, float* dst, std::int64_t row_stride, std::int64_t B, std::int64_t T,
                        std::int64_t H, std::int64_t D, cudaStream_t stream) {
  merge_heads_f32(src, dst, row_stride, B, T, H, D, stream);
}
inline void merge_heads(const std::uint16_t* src, std::uint16_t* dst, std::int64_t row_stride, std::int64_t B,
                        std::int64_t T, std::int64_t H, std::int64_t D, cudaStream_t stream) {
  merge_heads_16(src, dst, row_stride, B, T, H, D, stream);
}

// split_heads from rows whose batch elements start batch_stride apart (see above).
template <typename Element>
void split_heads_view(const Element* src, std::int64_t row_stride, std::int64_t batch_stride, Element* dst,
                      std::int64_t B, std::int64_t T, std::int64_t H, std::int64_t D, cudaStream_t stream) {
  if (B <= 1 || batch_stride == T * row_stride) return split_heads(src, row_stride, dst, B, T, H, D, stream);
  for (std::int64_t b = 0; b < B; ++b) {
    split_heads(src + b * batch_stride, row_stride, dst + b * H * T * D, 1, T, H, D, stream);
  }
}

// merge_heads into rows whose batch elements start batch_stride apart (see above).
template <typename Element>
void merge_heads_view(const Element* src, Element* dst, std::int64_t row_stride, std::int64_t batch_stride,
                      std::int64_t B, std::int64_t T, std::int64_t H, std::int64_t D, cudaStream_t stream) {
  if (B <= 1 || batch_stride == T * row_stride) return merge_heads(src, dst, row_stride, B, T, H, D, stream);
  for (std::int64_t b = 0; b < B; ++b) {
    merge_heads(src + b * H * T * D, dst + b * batch_stride, row_stride, 1, T, H, D, stream);
  }
}

// How a (B, H, T, D) view gathers into contiguous (B, H, T, D) order with split_heads_view (and
// scatters back with merge_heads_view): heads of packed rows (row stride W, per batch element),
// or a chunk of the rows of contiguous heads — strides [H*S, S, D, 1] with S >= T*D, such as
// ring attention's halves of a contiguous (B, H, 2c, D) buffer — gathered as B*H runs of T rows
// of D. nullopt for any other view.
struct HeadsGather {
  std::int64_t row_stride = 0, batch_stride = 0, batches = 0, T = 0, H = 0, D = 0;
};
// f32, bf16 and f16 views (the layout kernels move f32 or 16-bit values).
inline std::optional<HeadsGather> heads_gather(const Tensor& t) {
  const bool layout_dtype = t.dtype() == DType::f32 || t.dtype() == DType::bf16 || t.dtype() == DType::f16;
  if (t.dim() != 4 || !layout_dtype) return std::nullopt;
  const std::int64_t B = t.size(0), H = t.size(1), T = t.size(2), D = t.size(3);
  if (const std::optional<std::int64_t> w = heads_row_stride(t, true)) return HeadsGather{*w, t.stride(0), B, T, H, D};
  const bool chunk_of_heads = t.stride(3) == 1 && (T == 1 || t.stride(2) == D) && t.stride(1) >= T * D &&
                              (B == 1 || t.stride(0) == H * t.stride(1));
  if (chunk_of_heads) return HeadsGather{D, t.stride(1), B * H, T, 1, D};
  return std::nullopt;
}

}  // namespace myriad::cuda
