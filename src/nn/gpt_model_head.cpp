// GptModel: the token (+ position) embedding and the loss head — serial, vocabulary-parallel
// (tp > 1: each rank's vocabulary rows, all-reduced lookups, the vocab-parallel cross-entropy)
// and sequence-parallel (reduce-scattered lookups, gathered head input, partial norm gradients).
#include <cstring>

#include "myriad/dist/tensor_parallel_region.h"
#include "myriad/dist/vocab_parallel.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/nn/linear.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/ops/embedding.h"
#include "myriad/ops/norms.h"
#include "myriad/ops/elementwise.h"

namespace myriad::nn {

std::int64_t GptModel::vocab_start() const {
  return config_.padded_vocab_size() * split_.tp_rank() / split_.tp_size();
}

std::int64_t GptModel::head_columns() const {
  return dist::VocabShard{vocab_start(), config_.vocab_size}.real_columns(config_.padded_vocab_size() /
                                                                          split_.tp_size());
}

Tensor GptModel::head_weight(bool grad) const {
  const Parameter& p = store_[head_];
  const Tensor& t = grad ? p.grad : p.value;
  return t.slice(0, 0, head_columns());  // this rank's real vocabulary rows: padding never gets logits
}

void GptModel::embed(const Tensor& ids_in, Tensor& out) {
  Buffers& b = buffers_;
  const std::int64_t N = b.B * b.T, C = config_.n_embd;
  const bool head_shares = head_ == wte_;
  acquire(embedding_unit_, Pass::forward);
  if (split_.tp_size() == 1) {
    embedding_forward(EmbeddingArgs{}, placement_.from_host(ids_in), store_[wte_].value, out);
  } else {
    const dist::VocabShard shard = dist::VocabShard{vocab_start(), config_.vocab_size};
    if (split_.sharded_sequence()) {  // every rank's partial lookup, summed into each rank's rows
      Tensor partial = b.scratch.d_h.view({N, C});
      dist::vocab_parallel_embedding_lookup(shard, ids_in.view({N}), store_[wte_].value, partial);
      dist::reduce_scatter_to_sequence_region_forward(*split_.tp, partial, out);
    } else {
      Tensor flat = out.view({N, C});
      dist::vocab_parallel_embedding_forward(*split_.tp, shard, ids_in.view({N}), store_[wte_].value, flat);
    }
  }
  if (wpe_ != npos) {
    embedding_forward(EmbeddingArgs{}, b.row_positions, store_[wpe_].value, b.pos_emb);
    add_into(out, b.pos_emb);
  }
  if (!head_shares) release(embedding_unit_, Pass::forward);
}

void GptModel::embed_backward(const Tensor& ids_in, const Tensor& grad) {
  Buffers& b = buffers_;
  const std::int64_t N = b.B * b.T, C = config_.n_embd;
  const Pass pass = head_ == wte_ ? Pass::backward : Pass::backward_grads;
  if (pass == Pass::backward_grads) acquire(embedding_unit_, pass);
  // Sequence parallel: the full gradient (every rank's rows), so that the lookups' and the
  // replicated position table's gradients are complete on every rank without a reduction.
  Tensor full = grad;
  if (split_.sharded_sequence()) {
    dist::reduce_scatter_to_sequence_region_backward(*split_.tp, grad, b.scratch.d_full);
    full = b.scratch.d_full;
  }
  if (split_.tp_size() == 1) {
    embedding_backward(EmbeddingArgs{}, placement_.from_host(ids_in), full, store_[wte_].grad);
  } else {
    dist::vocab_parallel_embedding_backward(dist::VocabShard{vocab_start(), config_.vocab_size}, ids_in.view({N}), full.view({N, C}), store_[wte_].grad);
  }
  if (wpe_ != npos) embedding_backward(EmbeddingArgs{}, b.positions, full.view({b.B, b.T, C}), store_[wpe_].grad);
  release(embedding_unit_, pass);
  grads_ready(embedding_unit_);
}

Tensor GptModel::head_input(Slot& s) {
  const std::int64_t N = buffers_.B * buffers_.T, C = config_.n_embd;
  if (!split_.sharded_sequence()) return s.hf.view({N, C});
  dist::gather_from_sequence_region_forward(*split_.tp, s.hf, buffers_.hf_gathered);
  return buffers_.hf_gathered.view({N, C});
}

LossSum GptModel::head_forward(Slot& s, const Tensor& targets_in) {
  Buffers& b = buffers_;
  const std::int64_t N = b.B * b.T;
  acquire(head_unit_, Pass::forward);
  const Tensor& last = s.residual.back();
  if (config_.norm == NormKind::layernorm) {
    layernorm_forward(LayernormArgs{.eps = config_.norm_eps}, last, store_[norm_w_].value, store_[norm_b_].value,
                      s.hf, s.hf_mean, s.hf_rstd);
  } else {
    rmsnorm_forward(RmsnormArgs{.eps = config_.norm_eps}, last, store_[norm_w_].value, s.hf, s.hf_rstd);
  }
  const Tensor input = head_input(s);  // sequence parallel: gathered on every rank, columns or not
  if (head_columns() > 0) linear_forward(input, head_weight(false), Tensor(), s.logits);
  release(head_unit_, Pass::forward);
  if (head_ == wte_) release(embedding_unit_, Pass::forward);
  LossSum result;
  if (!targets_in.defined()) return result;
  // The targets on the host (to count them) and where the loss runs.
  const Tensor host_targets = placement_.to_host(targets_in).view({N});
  if (split_.tp_size() == 1) {
    cross_entropy_forward(CrossEntropyArgs{.ignore_index = kIgnoreIndex}, s.logits, placement_.from_host(host_targets),
                          s.losses, s.lse);
  } else {
    dist::vocab_parallel_cross_entropy_forward(*split_.tp, dist::VocabShard{vocab_start(), config_.vocab_size}, s.logits, host_targets, kIgnoreIndex,
                                               s.losses, s.lse);
  }
  const Tensor host_losses = placement_.to_host(s.losses);
  const float* losses = host_losses.data<float>();
  for (std::int64_t i = 0; i < N; ++i) result.sum += losses[i];  // ignored rows are 0
  result.tokens = count_valid_targets(host_targets, kIgnoreIndex);
  return result;
}

void GptModel::head_backward(Slot& s, const Tensor& targets_in, float loss_scale, Tensor& grad) {
  Buffers& b = buffers_;
  const std::int64_t N = b.B * b.T, C = config_.n_embd;
  acquire(head_unit_, Pass::backward);
  if (head_ == wte_) acquire(embedding_unit_, Pass::backward);
  fill(b.grad_losses, loss_scale);
  // dlogits overwrite the logits buffer (the op reads each element first).
  if (split_.tp_size() == 1) {
    cross_entropy_backward(CrossEntropyArgs{.ignore_index = kIgnoreIndex}, s.logits,
                           placement_.from_host(targets_in).view({N}), s.lse, b.grad_losses, s.logits);
  } else {
    dist::vocab_parallel_cross_entropy_backward(dist::VocabShard{vocab_start(), config_.vocab_size}, s.logits, targets_in.view({N}), kIgnoreIndex, s.lse,
                                                b.grad_losses, s.logits);
  }
  Tensor head_grad = head_weight(true), no_bias;
  Tensor d_hf = b.d_hf.view({N, C});
  const Tensor input = head_input(s);
  if (head_columns() > 0) {
    linear_backward(input, head_weight(false), s.logits, d_hf, false, head_grad, no_bias);
  } else {
    zero(d_hf);  // no real vocabulary here: this rank adds nothing to the input's gradient
  }
  Tensor d_rows = b.d_hf;  // sum the vocabulary shards' contributions over tp
  if (split_.sharded_sequence()) {
    d_rows = b.scratch.d_hs;
    dist::gather_from_sequence_region_backward(*split_.tp, b.d_hf, d_rows);
  } else if (split_.tp_size() > 1) {
    dist::copy_to_tp_region_backward(*split_.tp, b.d_hf);
  }
  // Sequence parallel: the final norm's gradients are partial sums over this rank's rows.
  const bool partial = split_.sharded_sequence();
  if (partial) zero(b.norm_grads);
  Tensor w_grad = partial ? b.norm_grads.slice(0, 0, C) : store_[norm_w_].grad;
  const Tensor& last = s.residual.back();
  if (config_.norm == NormKind::layernorm) {
    Tensor b_grad = partial ? b.norm_grads.slice(0, C, 2 * C) : store_[norm_b_].grad;
    layernorm_backward(LayernormArgs{.eps = config_.norm_eps}, last, store_[norm_w_].value, s.hf_mean, s.hf_rstd,
                       d_rows, grad, w_grad, b_grad);
  } else {
    rmsnorm_backward(RmsnormArgs{.eps = config_.norm_eps}, last, store_[norm_w_].value, s.hf_rstd, d_rows, grad,
                     w_grad);
  }
  if (partial) {
    split_.tp->all_reduce(b.norm_grads);
    add_into(store_[norm_w_].grad, b.norm_grads.slice(0, 0, C));
    if (norm_b_ != npos) add_into(store_[norm_b_].grad, b.norm_grads.slice(0, C, 2 * C));
  }
  release(head_unit_, Pass::backward);
  grads_ready(head_unit_);
}

}  // namespace myriad::nn
