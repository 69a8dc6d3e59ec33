// Ring attention: causal self-attention over a sequence split across the context-parallel group
// (nn/context_parallel.h: rank r holds chunks r and 2 cp - 1 - r of c positions each).
//
// Forward: the rank's K and V (both chunks, packed) travel round the ring; at step s the rank
// holds those of rank r - s and attends its two query chunks to the two key chunks with the
// positions' global offsets (ops/attention.h), merging partial results by lse (attention_merge).
// The transfer of the next K/V is started before the step's compute and waited for after it, so
// communication hides behind attention. Pairs no query of the chunk can see (a later key chunk
// under the causal mask, or no listed block of a block-sparse layout) are skipped: with load
// balancing every rank computes the same number of chunk pairs.
// Backward: K/V travel the same way; the gradients of each K/V chunk pair accumulate on a second
// ring one step behind (each rank adds its queries' share, then passes them on), and after cp
// steps they arrive at their owner. The first step's diagonal pairs write (they are always
// computed, visible or not), the rest accumulate.
//
// Tensors (B, H, 2c, D) as attention_forward's (views allowed); `lse` is (B, Hq, 2c) contiguous,
// but holds the two chunks' rows as two contiguous (B, Hq, c) blocks (the backward's format; the
// rows are no one else's business). args: scale, causal, layout (global blocks; both offsets are
// set here). Collective over the group; every rank calls with the same shapes. A group of one is
// the plain attention op (whole sequence, lse in its usual (B, Hq, T) order).
#pragma once

#include "myriad/nn/context_parallel.h"
#include "myriad/ops/attention.h"

namespace myriad::nn {

void ring_attention_forward(const ContextParallel& cp, const AttentionArgs& args, const Tensor& q, const Tensor& k,
                            const Tensor& v, Tensor& out, Tensor& lse);
void ring_attention_backward(const ContextParallel& cp, const AttentionArgs& args, const Tensor& q, const Tensor& k,
                             const Tensor& v, const Tensor& out, const Tensor& lse, const Tensor& grad_out,
                             Tensor& grad_q, Tensor& grad_k, Tensor& grad_v);

}  // namespace myriad::nn
