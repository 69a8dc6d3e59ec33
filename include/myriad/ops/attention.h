// Scaled dot-product self-attention (causal by default) with grouped-query heads.
//
//   out[b, h, i, :] = sum_j softmax_j(scale * q[b, h, i, :] . k[b, g, j, :]) v[b, g, j, :]
//   lse[b, h, i]    = log sum_j exp(scale * q[b, h, i, :] . k[b, g, j, :])   (saved for backward)
//
// where g = h / (Hq / Hkv) is the kv head that q head h reads (grouped-query attention; Hkv = Hq
// is plain multi-head attention, Hkv = 1 multi-query), j runs over all T keys, or over j <= i
// when causal, and scale = 1 / sqrt(D) unless args.scale is set.
//
// Shapes: q, out (B, Hq, T, D); k, v (B, Hkv, T, D); lse (B, Hq, T), contiguous. Hq % Hkv == 0.
// q, k, v, out and the gradients may be strided views (e.g. a (B, T, H, D) tensor permuted to
// (B, H, T, D)); only D must have unit stride, and rows (T) must not overlap (stride >= D). Inputs
// are never copied. out must not overlap k or v.
//
// The computation is blocked (flash-attention style): per (b, h, query block) an online softmax
// keeps a running max and sum per query row and rescales the output accumulator, so no T x T
// matrix is ever formed: memory is the lse vector plus O(block_q * block_k) scratch per thread.
// Backward recomputes the probabilities block by block from lse.
//
// Gradient contract: q, k, v are activations, so attention_backward writes grad_q, grad_k and
// grad_v (`=`). Any of them may be an undefined Tensor to skip it. Results do not depend on the
// number of threads.
#pragma once

#include "myriad/core/tensor.h"

namespace myriad {

struct AttentionArgs {
  float scale = 0.0f;  // multiplies q . k; 0 means 1 / sqrt(D)
  bool causal = true;  // query i attends to keys j <= i only
  int block_q = 0;     // query rows per block; 0 picks by T (128, or 256 from T = 2048: measured)
  int block_k = 0;     // key rows per block; 0 as block_q. Tuning only: results barely depend on it
};

// Effective scale: args.scale, or 1 / sqrt(head_dim) when it is 0.
float attention_scale(const AttentionArgs& args, std::int64_t head_dim);

void attention_forward(const AttentionArgs& args,
                       const Tensor& q,  // (B, Hq, T, D)
                       const Tensor& k,  // (B, Hkv, T, D)
                       const Tensor& v,  // (B, Hkv, T, D)
                       Tensor& out,      // (B, Hq, T, D)
                       Tensor& lse);     // (B, Hq, T)
void attention_backward(const AttentionArgs& args,
                        const Tensor& q,         // (B, Hq, T, D)
                        const Tensor& k,         // (B, Hkv, T, D)
                        const Tensor& v,         // (B, Hkv, T, D)
                        const Tensor& out,       // (B, Hq, T, D) from attention_forward
                        const Tensor& lse,       // (B, Hq, T) from attention_forward
                        const Tensor& grad_out,  // (B, Hq, T, D)
                        Tensor& grad_q,          // (B, Hq, T, D)  written
                        Tensor& grad_k,          // (B, Hkv, T, D) written
                        Tensor& grad_v);         // (B, Hkv, T, D) written

namespace cpu {
void attention_forward(const AttentionArgs& args, const Tensor& q, const Tensor& k, const Tensor& v, Tensor& out,
                       Tensor& lse);
void attention_backward(const AttentionArgs& args, const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                        const Tensor& lse, const Tensor& grad_out, Tensor& grad_q, Tensor& grad_k, Tensor& grad_v);
}  // namespace cpu

}  // namespace myriad
