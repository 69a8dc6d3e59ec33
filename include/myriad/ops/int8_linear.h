// Weight-only INT8: a linear layer's weight stored as int8 with float scales, the activations and
// the products in f32.
//
// Quantisation (symmetric, per output channel, optionally per group of input columns):
//   W (N, K) f32 -> q (N, K) int8, scales (N, G) f32 with G = groups(K, group_size)
//   (group_size 0: one group per row, i.e. per output channel; else groups of group_size
//   consecutive columns, the last one shorter when group_size does not divide K);
//   scale[n, g] = max |W[n, k in g]| / 127 (0 for an all-zero group),
//   q[n, k] = round-half-away-from-zero(W[n, k] / scale[n, g]) in [-127, 127] (0 where scale is 0).
//   The dequantised weight q * scale is within scale / 2 of W everywhere.
// Linear: y (..., N) = x (..., K) dequant(q, scales)^T + bias (N, or undefined), f32 — the same
// result as linear_forward on the dequantised weight, up to the summation order of the GEMM.
// The CPU dequantises blocks of rows into a small f32 buffer and multiplies them with BLAS (the
// full f32 weight never exists); a GPU backend reads the int8 weight directly.
// Embedding (an INT8 token embedding: the table quantised per row like a weight):
//   out (..., C)[n, :] = dequant(q, scales)[ids[n], :], ids (...) i32 in [0, V), q (V, C) int8,
//   scales (V, G); only the looked-up rows are dequantised. The CPU op checks the ids (an id out of
//   range throws naming it); a device backend trusts them (checked on the host before placing, as
//   the f32 embedding's EmbeddingArgs::ids_checked).
// Layouts: every tensor contiguous; x, y, scales, bias, out f32; q int8; ids i32.
#pragma once

#include <cstdint>

#include "myriad/core/tensor.h"

namespace myriad {

struct Int8Args {
  std::int64_t group_size = 0;  // input columns per scale; 0 = the whole row (per output channel)
};

// Scales per row for K input columns: ceil(K / group_size), or 1 for group_size 0.
std::int64_t int8_groups(std::int64_t K, std::int64_t group_size);

void quantize_int8(const Int8Args& args, const Tensor& weight, Tensor& q, Tensor& scales);
void dequantize_int8(const Int8Args& args, const Tensor& q, const Tensor& scales, Tensor& weight);
void int8_linear_forward(const Int8Args& args, const Tensor& x, const Tensor& q, const Tensor& scales,
                         const Tensor& bias, Tensor& y);
void int8_embedding_forward(const Int8Args& args, const Tensor& ids, const Tensor& q, const Tensor& scales,
                            Tensor& out);

namespace cpu {
void quantize_int8(const Int8Args& args, const Tensor& weight, Tensor& q, Tensor& scales);
void dequantize_int8(const Int8Args& args, const Tensor& q, const Tensor& scales, Tensor& weight);
void int8_linear_forward(const Int8Args& args, const Tensor& x, const Tensor& q, const Tensor& scales,
                         const Tensor& bias, Tensor& y);
void int8_embedding_forward(const Int8Args& args, const Tensor& ids, const Tensor& q, const Tensor& scales,
                            Tensor& out);
}  // namespace cpu

}  // namespace myriad
