// Vocabulary-parallel embedding and cross-entropy: the ops on this rank's shard, the per-token
// combination (ops/vocab_shard_loss.h) where the logits are, all-reduces over tp.
#include "myriad/parallel/vocab_parallel.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "myriad/core/error.h"
#include "myriad/nn/host_tokens.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/embedding.h"
#include "myriad/ops/placement.h"
#include "myriad/ops/vocab_shard_loss.h"

namespace myriad::parallel {

namespace {

// The global ids or targets as a contiguous host vector, checked to lie in the real vocabulary.
Tensor host_tokens(const char* op, const char* what, const VocabShard& shard, const Tensor& tokens,
                   std::int32_t ignore_index, bool allow_ignore) {
  return nn::checked_host_tokens(op, what, tokens, shard.vocab_size,
                                 allow_ignore ? std::optional<std::int32_t>(ignore_index) : std::nullopt);
}

// Global tokens -> `map` of them (ops/vocab_shard_loss.h) where `like` is. Host tokens are checked
// against the vocabulary and placed there first; tokens already on that device were checked by
// whoever placed them (a recorded micro-batch's staged inputs: train::MicroBatchGraph) and are
// mapped where they are, so nothing is read on the host.
Tensor shard_tokens(const char* op, const char* what, const VocabShard& shard, const Tensor& tokens,
                    const VocabShardMap& map, bool allow_ignore, const Tensor& like) {
  const ops::Placement placement = ops::placement_of(like, "like");
  const bool placed_there = !tokens.device().is_cpu() && tokens.device() == like.device();
  const Tensor placed = placed_there
                            ? tokens.contiguous()
                            : placement.from_host(host_tokens(op, what, shard, tokens, map.ignore_index, allow_ignore));
  Tensor out = placement.empty(placed.shape(), DType::i32);
  vocab_shard_tokens(map, placed, out);
  return out;
}

constexpr std::int32_t kNoIgnore = std::numeric_limits<std::int32_t>::min();

// The embedding's map: a row of the table's `rows` (padding included), -1 for another shard's id.
VocabShardMap rows_map(const VocabShard& shard, std::int64_t rows) {
  return VocabShardMap{.vocab_start = shard.vocab_start, .rows = rows, .elsewhere = -1, .ignore_index = kNoIgnore};
}

}  // namespace

std::int64_t VocabShard::real_columns(std::int64_t rows) const {
  return std::clamp<std::int64_t>(vocab_size - vocab_start, 0, rows);
}

void vocab_parallel_embedding_lookup(const VocabShard& shard, const Tensor& ids, const Tensor& table, Tensor& out) {
  const Tensor local =
      shard_tokens("vocab_parallel_embedding_forward", "id", shard, ids, rows_map(shard, table.size(0)), false, table);
  embedding_forward(EmbeddingArgs{.vocab_shard = true, .ids_checked = true}, local, table, out);
}

void vocab_parallel_embedding_forward(distributed::Communicator& tp, const VocabShard& shard, const Tensor& ids,
                                      const Tensor& table, Tensor& out) {
  vocab_parallel_embedding_lookup(shard, ids, table, out);
  tp.all_reduce(out);
}

void vocab_parallel_embedding_backward(const VocabShard& shard, const Tensor& ids, const Tensor& grad_out,
                                       Tensor& grad_table) {
  const Tensor local = shard_tokens("vocab_parallel_embedding_backward", "id", shard, ids,
                                    rows_map(shard, grad_table.size(0)), false, grad_table);
  embedding_backward(EmbeddingArgs{.vocab_shard = true, .ids_checked = true}, local, grad_out, grad_table);
}

void vocab_parallel_cross_entropy_forward(distributed::Communicator& tp, const VocabShard& shard, const Tensor& logits,
                                          const Tensor& targets, std::int32_t ignore_index, Tensor& losses,
                                          Tensor& lse) {
  const char* op = "vocab_parallel_cross_entropy_forward";
  const std::int64_t n = targets.numel();
  const std::int64_t columns = logits.defined() && logits.numel() > 0 ? shard.real_columns(logits.size(1)) : 0;
  const ops::Placement placement = ops::placement_of(losses, "losses");
  // Per row: 1 = the target is in this shard's columns, 0 = in another's, -1 = ignored.
  const Tensor state = shard_tokens(op, "target", shard, targets,
                                    VocabShardMap{.output = VocabShardMap::Output::state,
                                                  .vocab_start = shard.vocab_start,
                                                  .rows = columns,
                                                  .ignore_index = ignore_index},
                                    true, losses)
                           .view({n});
  // This shard's lse and loss over its columns (targets elsewhere as ignored: loss 0); a rank
  // without real columns contributes lse -inf.
  Tensor local_lse = placement.empty({n}), local_loss = placement.empty({n});
  if (columns > 0) {
    MYRIAD_CHECK(logits.dim() == 2 && logits.size(0) == n,
                 op << ": logits " << logits.describe() << " must be (" << n << ", columns)");
    const Tensor local = shard_tokens(
        op, "target", shard, targets,
        VocabShardMap{
            .vocab_start = shard.vocab_start, .rows = columns, .elsewhere = ignore_index, .ignore_index = ignore_index},
        true, logits);
    cross_entropy_forward(CrossEntropyArgs{.ignore_index = ignore_index, .classes = columns, .targets_checked = true},
                          logits, local, local_loss, local_lse);
  } else {
    fill(local_lse, -std::numeric_limits<float>::infinity());
    fill(local_loss, 0.0f);
  }
  // Combined where the logits are, over the group's streams (nothing waits on the host).
  Tensor maxima = placement.empty({n});
  copy(local_lse, maxima);
  tp.all_reduce_on_stream(maxima, distributed::ReduceOp::max);
  Tensor packed = placement.empty({2 * n});  // [sum of exp(l_r - max) | target logit]
  vocab_shard_partials(state, local_lse, local_loss, maxima, packed);
  tp.all_reduce_on_stream(packed);
  vocab_shard_combine(state, maxima, packed, lse, losses);
}

void vocab_parallel_cross_entropy_backward(const VocabShard& shard, const Tensor& logits, const Tensor& targets,
                                           std::int32_t ignore_index, const Tensor& lse, const Tensor& grad_losses,
                                           Tensor& grad_logits) {
  const std::int64_t columns = logits.defined() && logits.numel() > 0 ? shard.real_columns(logits.size(1)) : 0;
  if (columns == 0) return;  // no real vocabulary here
  const char* op = "vocab_parallel_cross_entropy_backward";
  // Another shard's target: a negative value that is not ignore_index, the softmax part only.
  const Tensor local = shard_tokens(op, "target", shard, targets,
                                    VocabShardMap{.vocab_start = shard.vocab_start,
                                                  .rows = columns,
                                                  .elsewhere = ignore_index == -1 ? -2 : -1,
                                                  .ignore_index = ignore_index},
                                    true, logits);
  cross_entropy_backward(CrossEntropyArgs{.ignore_index = ignore_index, .vocab_shard = true, .classes = columns},
                         logits, local, lse, grad_losses, grad_logits);
}

}  // namespace myriad::parallel
