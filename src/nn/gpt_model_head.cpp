// GptModel: the token (+ position) embedding and the loss head. The vocabulary and (with sequence
// parallelism) the token rows cross the tensor-parallel group only through the split's
// TensorParallel (nn/tensor_parallel.h), the identity for a group of one.
#include <algorithm>

#include "myriad/nn/gpt_model.h"
#include "myriad/nn/int8_embedding.h"
#include "myriad/nn/linear.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/ops/embedding.h"
#include "myriad/ops/norms.h"
#include "myriad/ops/elementwise.h"

namespace myriad::nn {

std::int64_t GptModel::head_columns() const {
  return std::clamp<std::int64_t>(config_.vocab_size - vocabulary_.begin, 0, vocabulary_.size());
}

std::int64_t GptModel::logits_width() const { return head_columns() > 0 ? vocabulary_.size() : 0; }

CrossEntropyArgs GptModel::loss_args() const {
  return CrossEntropyArgs{.ignore_index = kIgnoreIndex, .classes = head_columns()};
}

// out: the first residual; a 16-bit one gets the f32 sum (lookup + position) rounded once.
void GptModel::embed(const Tensor& ids, Tensor& residual) {
  Buffers& b = buffers_;
  Tensor out = residual.dtype() == DType::f32 ? residual : b.scratch.y_wide;
  const std::int64_t N = b.B * b.T, C = config_.n_embd;
  const bool head_shares = head_ == wte_;
  acquire(embedding_unit_, Pass::forward);
  // Each rank's lookup of the vocabulary rows it holds, summed into each rank's token rows.
  const TensorParallel& tp = split_.tensor_parallel();
  Tensor full = tp.full_of(out, b.scratch.d_h);
  Tensor lookup = full.view({N, C});
  if (store_[wte_].int8_values.defined()) {  // weight-only INT8 serving (whole model): the int8 rows
    int8_embedding_lookup(ids.view({N}), store_[wte_], lookup);
  } else {
    tp.embedding_lookup(ids.view({N}), store_[wte_].value, lookup);
  }
  tp.reduce_to_rows(full, out);
  if (wpe_ != npos) {
    embedding_forward(EmbeddingArgs{.ids_checked = true}, b.row_positions, store_[wpe_].value, b.pos_emb);  // 0..T-1
    add_into(out, b.pos_emb);
  }
  if (out.raw_data() != residual.raw_data()) copy(out, residual);
  if (!head_shares) release(embedding_unit_, Pass::forward);
}

void GptModel::embed_backward(const Tensor& ids, const Tensor& grad) {
  Buffers& b = buffers_;
  const std::int64_t N = b.B * b.T, C = config_.n_embd;
  const Pass pass = head_ == wte_ ? Pass::backward : Pass::backward_grads;
  if (pass == Pass::backward_grads) acquire(embedding_unit_, pass);
  // The full gradient (every rank's rows), so that the lookups' and the replicated position
  // table's gradients are complete on every rank without a reduction.
  const TensorParallel& tp = split_.tensor_parallel();
  Tensor full = tp.full_of(grad, b.scratch.d_full);
  tp.gather_rows(grad, full);
  tp.embedding_backward(ids.view({N}), full.view({N, C}), store_[wte_].grad);
  if (wpe_ != npos)
    embedding_backward(EmbeddingArgs{.ids_checked = true}, b.positions, full.view({b.B, b.T, C}), store_[wpe_].grad);
  release(embedding_unit_, pass);
  grads_ready(embedding_unit_);
}

Tensor GptModel::head_input(Slot& s) {
  const std::int64_t N = buffers_.B * buffers_.T, C = config_.n_embd;
  const TensorParallel& tp = split_.tensor_parallel();
  Tensor full = tp.full_of(s.hf, buffers_.hf_gathered);
  tp.gather_rows(s.hf, full);
  return full.view({N, C});
}

void GptModel::write_loss_scale(float loss_scale) { fill(buffers_.grad_losses, loss_scale); }

void GptModel::record_losses(int slot) {
  const std::int64_t N = buffers_.B * buffers_.T;
  losses_.record(buffers_.slots.at(slot).losses.view({N}));
}

std::int64_t GptModel::head_forward(Slot& s, const Tensor& targets_in) {
  Buffers& b = buffers_;
  const std::int64_t N = b.B * b.T;
  acquire(head_unit_, Pass::forward);
  const Tensor& last = s.residual.back();
  if (config_.norm == NormKind::layernorm) {
    layernorm_forward(LayernormArgs{.eps = config_.norm_eps}, last, store_[norm_w_].value, store_[norm_b_].value, s.hf,
                      s.hf_mean, s.hf_rstd);
  } else {
    rmsnorm_forward(RmsnormArgs{.eps = config_.norm_eps}, last, store_[norm_w_].value, s.hf, s.hf_rstd);
  }
  const Tensor input = head_input(s);  // sequence parallel: gathered on every rank, columns or not
  // Logits for every row of this rank's padded vocabulary (an aligned leading dimension for the
  // GEMMs); the loss reads the real columns only and gives the padding a zero gradient.
  if (head_columns() > 0) linear_forward(input, store_[head_], Tensor(), s.logits, activation_precision_);
  release(head_unit_, Pass::forward);
  if (head_ == wte_) release(embedding_unit_, Pass::forward);
  if (!targets_in.defined()) return 0;
  if (inputs_staged_) {  // the targets are in place; record_losses() records after the work ran
    split_.tensor_parallel().cross_entropy_forward(s.logits, targets_in.view({N}), loss_args(), s.losses, s.lse);
    return 0;
  }
  // The targets on the host (to count them) and where the loss runs; the losses (ignored rows 0)
  // stay where they are computed until the step reads their sum (losses_).
  const Tensor host_targets = placement_.to_host(targets_in).view({N});
  split_.tensor_parallel().cross_entropy_forward(s.logits, host_targets, loss_args(), s.losses, s.lse);
  losses_.record(s.losses.view({N}));
  return count_valid_targets(host_targets, kIgnoreIndex);
}

void GptModel::head_backward(Slot& s, const Tensor& targets_in, float loss_scale, Tensor& grad) {
  Buffers& b = buffers_;
  const std::int64_t N = b.B * b.T, C = config_.n_embd;
  acquire(head_unit_, Pass::backward);
  if (head_ == wte_) acquire(embedding_unit_, Pass::backward);
  if (!inputs_staged_) write_loss_scale(loss_scale);
  // dlogits overwrite the logits buffer (the op reads each element first).
  const TensorParallel& tp = split_.tensor_parallel();
  tp.cross_entropy_backward(s.logits, targets_in.view({N}), loss_args(), s.lse, b.grad_losses, s.logits);
  Tensor no_bias;
  Tensor d_hf = b.d_hf.view({N, C});
  const Tensor input = head_input(s);
  if (head_columns() > 0) {  // the padding rows' gradient gets 0: their logits' gradient is 0
    linear_backward(input, weight_operand(store_[head_], activation_precision_), s.logits, d_hf, false,
                    store_[head_].grad, no_bias, activation_precision_);
  } else {
    zero(d_hf);  // no real vocabulary here: this rank adds nothing to the input's gradient
  }
  Tensor d_rows = tp.rows_of(b.d_hf, b.scratch.d_hs);  // the vocabulary shards' contributions, summed
  tp.reduce_to_rows(b.d_hf, d_rows);
  // The final norm's gradients: from this rank's rows under sequence parallelism (tp_token_share:
  // summed over tp once per step, before the update).
  zero(b.norm_grads);
  Tensor w_grad = b.norm_grads.slice(0, 0, C), b_grad = b.norm_grads.slice(0, C, 2 * C);
  const Tensor& last = s.residual.back();
  if (config_.norm == NormKind::layernorm) {
    layernorm_backward(LayernormArgs{.eps = config_.norm_eps}, last, store_[norm_w_].value, s.hf_mean, s.hf_rstd,
                       d_rows, grad, w_grad, b_grad);
  } else {
    rmsnorm_backward(RmsnormArgs{.eps = config_.norm_eps}, last, store_[norm_w_].value, s.hf_rstd, d_rows, grad,
                     w_grad);
  }
  add_into(store_[norm_w_].grad, w_grad);
  if (norm_b_ != npos) add_into(store_[norm_b_].grad, b_grad);
  release(head_unit_, Pass::backward);
  grads_ready(head_unit_);
}

}  // namespace myriad::nn
