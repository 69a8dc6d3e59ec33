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

// Global tokens -> this shard's rows: the row, or `elsewhere` when another shard holds the token
// (ignore_index kept as it is), placed like `like`.
Tensor local_tokens(const Tensor& host, const VocabShard& shard, std::int64_t rows, std::int32_t elsewhere,
                    std::int32_t ignore_index, const Tensor& like) {
  Tensor local = Tensor::empty(host.shape(), DType::i32);
  const std::int32_t* t = host.data<std::int32_t>();
  std::int32_t* out = local.data<std::int32_t>();
  for (std::int64_t i = 0; i < host.numel(); ++i) {
    const std::int64_t row = static_cast<std::int64_t>(t[i]) - shard.vocab_start;
    out[i] = t[i] == ignore_index ? ignore_index : row >= 0 && row < rows ? static_cast<std::int32_t>(row) : elsewhere;
  }
  return ops::placement_of(like, "like").from_host(local);
}

constexpr std::int32_t kNoIgnore = std::numeric_limits<std::int32_t>::min();

}  // namespace

std::int64_t VocabShard::real_columns(std::int64_t rows) const {
  return std::clamp<std::int64_t>(vocab_size - vocab_start, 0, rows);
}

void vocab_parallel_embedding_lookup(const VocabShard& shard, const Tensor& ids, const Tensor& table, Tensor& out) {
  const char* op = "vocab_parallel_embedding_forward";
  const Tensor host = host_tokens(op, "id", shard, ids, kNoIgnore, false);
  const Tensor local = local_tokens(host, shard, table.size(0), -1, kNoIgnore, table);
  embedding_forward(EmbeddingArgs{.vocab_shard = true, .ids_checked = true}, local, table, out);
}

void vocab_parallel_embedding_forward(distributed::Communicator& tp, const VocabShard& shard, const Tensor& ids,
                                      const Tensor& table, Tensor& out) {
  vocab_parallel_embedding_lookup(shard, ids, table, out);
  tp.all_reduce(out);
}

void vocab_parallel_embedding_backward(const VocabShard& shard, const Tensor& ids, const Tensor& grad_out,
                                       Tensor& grad_table) {
  const char* op = "vocab_parallel_embedding_backward";
  const Tensor host = host_tokens(op, "id", shard, ids, kNoIgnore, false);
  const Tensor local = local_tokens(host, shard, grad_table.size(0), -1, kNoIgnore, grad_table);
  embedding_backward(EmbeddingArgs{.vocab_shard = true, .ids_checked = true}, local, grad_out, grad_table);
}

void vocab_parallel_cross_entropy_forward(distributed::Communicator& tp, const VocabShard& shard, const Tensor& logits,
                                          const Tensor& targets, std::int32_t ignore_index, Tensor& losses,
                                          Tensor& lse) {
  const char* op = "vocab_parallel_cross_entropy_forward";
  const std::int64_t n = targets.numel();
  const Tensor host = host_tokens(op, "target", shard, targets, ignore_index, true);
  const std::int64_t columns = logits.defined() && logits.numel() > 0 ? shard.real_columns(logits.size(1)) : 0;
  const ops::Placement placement = ops::placement_of(losses, "losses");
  // Per row: 1 = the target is in this shard's columns, 0 = in another's, -1 = ignored.
  Tensor host_state = Tensor::empty({n}, DType::i32);
  const std::int32_t* t = host.data<std::int32_t>();
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t column = static_cast<std::int64_t>(t[i]) - shard.vocab_start;
    host_state.data<std::int32_t>()[i] = t[i] == ignore_index ? -1 : column >= 0 && column < columns ? 1 : 0;
  }
  const Tensor state = placement.from_host(host_state);
  // This shard's lse and loss over its columns (targets elsewhere as ignored: loss 0); a rank
  // without real columns contributes lse -inf.
  Tensor local_lse = placement.empty({n}), local_loss = placement.empty({n});
  if (columns > 0) {
    MYRIAD_CHECK(logits.dim() == 2 && logits.size(0) == n,
                 op << ": logits " << logits.describe() << " must be (" << n << ", columns)");
    const Tensor local = local_tokens(host, shard, columns, ignore_index, ignore_index, logits);
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
  const Tensor host = host_tokens(op, "target", shard, targets, ignore_index, true);
  // Another shard's target: a negative value that is not ignore_index, the softmax part only.
  const std::int32_t elsewhere = ignore_index == -1 ? -2 : -1;
  const Tensor local = local_tokens(host, shard, columns, elsewhere, ignore_index, logits);
  cross_entropy_backward(CrossEntropyArgs{.ignore_index = ignore_index, .vocab_shard = true, .classes = columns},
                         logits, local, lse, grad_losses, grad_logits);
}

}  // namespace myriad::parallel
