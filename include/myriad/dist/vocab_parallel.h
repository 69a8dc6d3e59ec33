// Vocabulary-parallel embedding and cross-entropy over the tensor-parallel group.
//
// The (padded) vocabulary is split in contiguous row blocks: tp rank r holds rows
// [vocab_start, vocab_start + V_local) of the embedding table and the same columns of the logits.
// Columns at or past `vocab_size` (the real vocabulary) are padding: they never get probability.
//
// Embedding: out[i] = table[ids[i]] — each rank writes the rows it holds (zeros elsewhere) and one
// all-reduce (sum) over tp completes it. Backward needs no communication: grad_out is replicated
// across tp, each rank accumulates (`+=`) the rows it holds.
//
// Cross-entropy never gathers the logits: per row, an all-reduce (max) of the local maxima, then
// one all-reduce (sum) of the packed [local sum of exp(x - max) | local target logit], give
//   lse = max + log(sum),  loss = lse - logit[target]  (0 for ignore_index rows).
// Backward is local: grad[n, j] = (exp(x - lse) - [target == vocab_start + j]) * grad_losses[n],
// 0 in padding columns and ignored rows. Results equal the serial cross_entropy_* up to float
// reassociation of the sums (3 x N floats communicated per call).
#pragma once

#include <cstdint>

#include "myriad/core/tensor.h"
#include "myriad/dist/communicator.h"

namespace myriad::dist {

struct VocabShard {
  std::int64_t vocab_start = 0;  // first global row/column held by this rank
  std::int64_t vocab_size = 0;   // the real vocabulary V (columns >= V are padding)
};

// The local part: out[i] = table row of ids[i] when this rank holds it, else zeros (no communication).
void vocab_parallel_embedding_lookup(const VocabShard& shard, const Tensor& ids, const Tensor& table, Tensor& out);
// ids (N) i32 in [0, V); table (V_local, C); out (N, C) written: the lookup, then all-reduce over tp.
void vocab_parallel_embedding_forward(Communicator& tp, const VocabShard& shard, const Tensor& ids,
                                      const Tensor& table, Tensor& out);
// grad_table (V_local, C) accumulated (`+=`).
void vocab_parallel_embedding_backward(const VocabShard& shard, const Tensor& ids, const Tensor& grad_out,
                                       Tensor& grad_table);

// logits (N, V_local) f32 contiguous; targets (N) i32; losses, lse (N) written.
void vocab_parallel_cross_entropy_forward(Communicator& tp, const VocabShard& shard, const Tensor& logits,
                                          const Tensor& targets, std::int32_t ignore_index, Tensor& losses,
                                          Tensor& lse);
// grad_logits (N, V_local) written (`=`); may alias logits.
void vocab_parallel_cross_entropy_backward(const VocabShard& shard, const Tensor& logits, const Tensor& targets,
                                           std::int32_t ignore_index, const Tensor& lse, const Tensor& grad_losses,
                                           Tensor& grad_logits);

}  // namespace myriad::dist
