// Vocabulary-parallel embedding and cross-entropy over the tensor-parallel group, written over
// the ops, so they run on host or device tensors alike.
//
// The (padded) vocabulary is split in contiguous row blocks: tp rank r holds rows
// [vocab_start, vocab_start + V_local) of the embedding table and the same columns of the logits.
// Rows at or past `vocab_size` (the real vocabulary) are padding: they never get probability, and
// the head computes logits only for the shard's real columns (VocabShard::real_columns).
//
// Embedding: out[i] = table[ids[i]] — each rank looks up the rows it holds (zeros elsewhere: the
// ops' vocab_shard mode) and one all-reduce (sum) over tp completes it. Backward needs no
// communication: grad_out is replicated across tp, each rank accumulates (`+=`) its rows.
//
// Cross-entropy never gathers the logits: each rank runs the cross-entropy op on its columns
// (targets elsewhere count as ignored), giving its log-sum-exp l_r and, for the targets it holds,
// the target logit x_t = l_r - loss_r. Per token, an all-reduce (max) of l_r, then one all-reduce
// (sum) of the packed [exp(l_r - max) | x_t] give
//   lse = max + log(sum),  loss = lse - x_t  (0 for ignore_index rows).
// These per-token vectors (3 x N floats) are combined where the logits live
// (ops/vocab_shard_loss.h) over stream-ordered all-reduces: on a GPU nothing waits on the host.
// Backward is local: the ops'
// shard backward with the combined lse, grad[n, j] = (exp(x - lse) - [target == vocab_start + j])
// * grad_losses[n]. Results equal the serial cross_entropy_* up to float reassociation.
//
// Token ids and targets are read on the host (the caller's batch; device copies are brought back)
// and checked there, so the device ops read no flag back;
// every other tensor lives where the table / logits live, and the communicator must carry tensors
// of that kind (host tensors always: NcclCommunicator hands them to its host group).
#pragma once

#include <cstdint>

#include "myriad/core/tensor.h"
#include "myriad/distributed/communicator.h"

namespace myriad::parallel {

struct VocabShard {
  std::int64_t vocab_start = 0;  // first global row/column held by this rank
  std::int64_t vocab_size = 0;   // the real vocabulary V (rows >= V are padding)
  // Of a shard of `rows` rows, the leading ones inside the real vocabulary (may be 0).
  std::int64_t real_columns(std::int64_t rows) const;
};

// ids (N) i32 in [0, V); table (V_local, C); out (N, C) written: this rank's rows, zeros elsewhere.
void vocab_parallel_embedding_lookup(const VocabShard& shard, const Tensor& ids, const Tensor& table, Tensor& out);
// The lookup, then the all-reduce over tp.
void vocab_parallel_embedding_forward(distributed::Communicator& tp, const VocabShard& shard, const Tensor& ids,
                                      const Tensor& table, Tensor& out);
// grad_table (V_local, C) accumulated (`+=`).
void vocab_parallel_embedding_backward(const VocabShard& shard, const Tensor& ids, const Tensor& grad_out,
                                       Tensor& grad_table);

// logits (N, W) f32 contiguous: the shard's padded columns, of which the first
// shard.real_columns(W) are real (undefined, 0 columns or no real ones when the shard holds no
// real vocabulary); targets (N) i32 global ids; losses, lse (N) written.
void vocab_parallel_cross_entropy_forward(distributed::Communicator& tp, const VocabShard& shard, const Tensor& logits,
                                          const Tensor& targets, std::int32_t ignore_index, Tensor& losses,
                                          Tensor& lse);
// grad_logits (N, W) written (`=`, 0 in the padding columns); may alias logits.
void vocab_parallel_cross_entropy_backward(const VocabShard& shard, const Tensor& logits, const Tensor& targets,
                                           std::int32_t ignore_index, const Tensor& lse, const Tensor& grad_losses,
                                           Tensor& grad_logits);

}  // namespace myriad::parallel
