// Scaled dot-product self-attention (causal by default) with grouped-query heads.
//
//   out[b, h, i, :] = sum_j softmax_j(scale * q[b, h, i, :] . k[b, g, j, :]) v[b, g, j, :]
//   lse[b, h, i]    = log sum_j exp(scale * q[b, h, i, :] . k[b, g, j, :])   (saved for backward)
//
// where g = h / (Hq / Hkv) is the kv head that q head h reads (grouped-query attention; Hkv = Hq
// is plain multi-head attention, Hkv = 1 multi-query), j runs over the visible keys, and scale =
// 1 / sqrt(D) unless args.scale is set. Query row i sits at global position args.q_offset + i and
// key row j at args.k_offset + j; key j is visible to query i when (causal) its position is not
// after the query's, and (with args.layout or args.selected) its block is listed for the query's
// block and head (ops/block_layout.h, ops/block_selection.h: block-sparse attention). A query row that sees no key gets
// out = 0 and lse = -inf, so partial results over disjoint key sets merge exactly (attention_merge: ring attention over
// context-parallel ranks).
//
// Shapes: q, out (B, Hq, Tq, D); k, v (B, Hkv, Tk, D); lse (B, Hq, Tq), contiguous. Hq % Hkv == 0.
// With a layout, the offsets are multiples of its block_size and both row ranges lie inside its
// query_blocks * block_size positions.
// q, k, v, out and the gradients may be strided views (e.g. a (B, T, H, D) tensor permuted to
// (B, H, T, D)); only D must have unit stride, and rows (T) must not overlap (stride >= D). Inputs
// are never copied. out must not overlap k or v.
//
// The computation is blocked (flash-attention style): per (b, h, query block) an online softmax
// keeps a running max and sum per query row and rescales the output accumulator, so no T x T
// matrix is ever formed: memory is the lse vector plus O(block_q * block_k) scratch per thread.
// Backward recomputes the probabilities block by block from lse. Work and memory are proportional
// to the visible (query block, key block) pairs: a block-sparse layout keeping m blocks per query
// block costs O(T m block_size D), and nothing of size T x T is formed.
//
// Gradient contract: q, k, v are activations, so attention_backward writes grad_q, grad_k and
// grad_v (`=`), or adds into them with args.accumulate (ring attention: one call per key chunk,
// with the out and lse of the merged forward). Any of them may be an undefined Tensor to skip it.
// Results do not depend on the number of threads.
//
// 16-bit products (args.operands bf16 / f16, the model's choice under training.precision for
// dense attention): q, k, v (backward: also out and grad_out) are rounded to the format first and
// the results (out; grad_q, grad_k, grad_v) are rounded to it too — the values 16-bit tensors
// would hold — with the softmax and every sum in f32 and lse f32. A device runs it on tensor
// cores on 16-bit copies (which also round the probabilities before P V and dS before its
// products, as FlashAttention does); the CPU on the rounded values. Not with accumulate. `out`
// may then be a tensor of the format itself (the same values; forward writes it, backward reads it),
// and so may the backward's grad_out and gradients (mixed precision keeps them in the format).
#pragma once

#include "myriad/core/tensor.h"
#include "myriad/ops/block_layout.h"
#include "myriad/ops/block_selection.h"

namespace myriad {

struct AttentionArgs {
  float scale = 0.0f;                   // multiplies q . k; 0 means 1 / sqrt(D)
  bool causal = true;                   // query i attends to keys at positions <= its own only
  int block_q = 0;                      // query rows per block; 0 picks by T (128, or 256 from T = 2048: measured);
                                        // with a layout always the layout's block_size
  int block_k = 0;                      // key rows per block; 0 as block_q. Tuning only: results barely depend on it
  std::int64_t q_offset = 0;            // global position of q's row 0
  std::int64_t k_offset = 0;            // global position of k's row 0
  const BlockLayout* layout = nullptr;  // block-sparse: only the listed key blocks; null = all
  bool accumulate = false;              // backward adds into grad_q / grad_k / grad_v
  // Block-sparse with a selection's fixed-capacity layout (ops/block_selection.h) on the tensors'
  // device instead of `layout` (at most one of the two): the CUDA kernels read it in place; the
  // CPU reads its compressed copy.
  const SelectedBlocks* selected = nullptr;
  DType operands = DType::f32;  // f32, or bf16 / f16: 16-bit products (see the file comment)
};

// out, lse <- the attention over the union of two disjoint key sets, from out, lse (one set) and
// part_out, part_lse (the other): weights exp(lse - new_lse). Rows with lse = -inf take the other
// side. Shapes as attention_forward's out and lse.
void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse);

// Effective scale: args.scale, or 1 / sqrt(head_dim) when it is 0.
float attention_scale(const AttentionArgs& args, std::int64_t head_dim);

void attention_forward(const AttentionArgs& args,
                       const Tensor& q,  // (B, Hq, T, D)
                       const Tensor& k,  // (B, Hkv, Tk, D)
                       const Tensor& v,  // (B, Hkv, Tk, D)
                       Tensor& out,      // (B, Hq, T, D)
                       Tensor& lse);     // (B, Hq, T)
void attention_backward(const AttentionArgs& args,
                        const Tensor& q,         // (B, Hq, T, D)
                        const Tensor& k,         // (B, Hkv, Tk, D)
                        const Tensor& v,         // (B, Hkv, Tk, D)
                        const Tensor& out,       // (B, Hq, T, D) from attention_forward
                        const Tensor& lse,       // (B, Hq, T) from attention_forward
                        const Tensor& grad_out,  // (B, Hq, T, D)
                        Tensor& grad_q,          // (B, Hq, T, D)  written
                        Tensor& grad_k,          // (B, Hkv, Tk, D) written
                        Tensor& grad_v);         // (B, Hkv, Tk, D) written

namespace cpu {
void attention_merge(Tensor& out, Tensor& lse, const Tensor& part_out, const Tensor& part_lse);
void attention_forward(const AttentionArgs& args, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                       Tensor& lse);
void attention_backward(const AttentionArgs& args, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& grad_out, Tensor& grad_q, Tensor& grad_k, Tensor& grad_v);
}  // namespace cpu

}  // namespace myriad
