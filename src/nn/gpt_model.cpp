// GptModel: embeddings, blocks, final norm, LM head and loss; buffer management per recompute mode.
#include "myriad/nn/gpt_model.h"

#include "myriad/nn/linear.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/ops/embedding.h"
#include "myriad/ops/norms.h"

namespace myriad::nn {

namespace {
constexpr std::size_t npos = static_cast<std::size_t>(-1);
}

GptModel::GptModel(const TransformerConfig& config) : config_(config) {
  config_.validate();
  const std::int64_t C = config.n_embd, Vp = config.padded_vocab_size();
  wte_ = store_.add("wte", {Vp, C}, ParamKind::embedding, ParamInit::normal, config.init_std);
  if (config.positions == PositionKind::learned) {
    wpe_ = store_.add("wpe", {config.block_size, C}, ParamKind::embedding, ParamInit::normal, config.init_std);
  }
  for (int l = 0; l < config.n_layer; ++l) blocks_.emplace_back(config_, l, store_);
  norm_w_ = store_.add("norm_f.weight", {C}, ParamKind::norm, ParamInit::ones);
  if (config.norm == NormKind::layernorm) norm_b_ = store_.add("norm_f.bias", {C}, ParamKind::bias, ParamInit::zeros);
  if (!config.tie_embeddings) {
    head_ = store_.add("lm_head.weight", {Vp, C}, ParamKind::weight, ParamInit::normal, config.init_std);
  }
  store_.allocate();
  build_units();
}

void GptModel::build_units() {
  // Parameters were registered embeddings, blocks, final norm/head: each unit is the span from its
  // first parameter's offset to the next unit's first offset (the last one to the buffer's end).
  std::vector<std::pair<std::string, std::int64_t>> starts;
  starts.emplace_back("embeddings", store_[wte_].offset);
  for (int l = 0; l < config_.n_layer; ++l) {
    starts.emplace_back("blocks." + std::to_string(l), store_.find("blocks." + std::to_string(l) + ".norm1.weight").offset);
  }
  starts.emplace_back("head", store_[norm_w_].offset);
  for (std::size_t u = 0; u < starts.size(); ++u) {
    std::int64_t end = u + 1 < starts.size() ? starts[u + 1].second : store_.numel();
    units_.push_back(ParamUnit{starts[u].first, starts[u].second, end});
  }
}

Tensor GptModel::head_weight(bool grad) const {
  const Parameter& p = store_[config_.tie_embeddings ? wte_ : head_];
  return (grad ? p.grad : p.value).slice(0, 0, config_.vocab_size);  // real vocabulary rows only
}

void GptModel::ensure_buffers(std::int64_t B, std::int64_t T, Recompute mode) {
  Buffers& b = buffers_;
  if (b.B == B && b.T == T && b.mode == mode && !b.residual.empty()) return;
  b = Buffers{};
  b.B = B;
  b.T = T;
  b.mode = mode;
  const std::int64_t C = config_.n_embd, V = config_.vocab_size, N = B * T;
  for (std::int64_t l = 0; l <= config_.n_layer; ++l) b.residual.push_back(Tensor::empty({B, T, C}));
  std::vector<ActivationSlot> slots = block_activation_slots(config_, B, T);
  BlockActivations shared;
  for (const ActivationSlot& slot : slots) shared.*(slot.member) = Tensor::empty(slot.shape);
  for (std::int64_t l = 0; l < config_.n_layer; ++l) {
    BlockActivations acts;
    for (const ActivationSlot& slot : slots) {
      bool own = mode == Recompute::none || (mode == Recompute::selective && slot.kept_by_selective);
      acts.*(slot.member) = own ? Tensor::empty(slot.shape) : shared.*(slot.member);
    }
    b.blocks.push_back(std::move(acts));
  }
  b.scratch = make_block_scratch(config_, B, T);
  b.positions = Tensor::empty({B, T}, DType::i32);
  for (std::int64_t i = 0; i < N; ++i) b.positions.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % T);
  if (config_.positions == PositionKind::learned) b.pos_emb = Tensor::empty({B, T, C});
  b.hf = Tensor::empty({B, T, C});
  b.hf_mean = Tensor::empty({N});
  b.hf_rstd = Tensor::empty({N});
  b.logits = Tensor::empty({N, V});
  b.losses = Tensor::empty({N});
  b.lse = Tensor::empty({N});
  b.grad_losses = Tensor::empty({N});
  b.d_hf = Tensor::empty({B, T, C});
  b.grad = Tensor::empty({B, T, C});
}

ActivationMemory GptModel::activation_memory(std::int64_t B, std::int64_t T, Recompute mode) const {
  ActivationMemory m;
  const std::int64_t C = config_.n_embd, N = B * T;
  std::vector<ActivationSlot> slots = block_activation_slots(config_, B, T);
  std::int64_t own_per_block = 0, shared = 0;
  for (const ActivationSlot& slot : slots) {
    std::int64_t bytes = shape_numel(slot.shape) * 4;
    bool own = mode == Recompute::none || (mode == Recompute::selective && slot.kept_by_selective);
    (own ? own_per_block : shared) += bytes;
  }
  m.saved_bytes = config_.n_layer * own_per_block + (config_.n_layer + 1) * N * C * 4 + 3 * N * 4 /*final norm*/ +
                  N * C * 4 /*hf*/;
  std::int64_t scratch_c = 4 * N * C + N * config_.qkv_width() +
                           (config_.mlp == MlpKind::swiglu ? 3 : 2) * N * config_.ffn_hidden;
  m.scratch_bytes = shared + scratch_c * 4 + (N * config_.vocab_size + 3 * N + 2 * N * C) * 4;
  return m;
}

double GptModel::flops_per_token(std::int64_t T) const {
  double matmul_params = 0;
  for (const Parameter& p : store_.all()) {
    if (p.kind == ParamKind::weight) matmul_params += static_cast<double>(shape_numel(p.shape));
  }
  if (config_.tie_embeddings) matmul_params += static_cast<double>(config_.vocab_size * config_.n_embd);
  return 6.0 * matmul_params + 6.0 * static_cast<double>(config_.n_layer * T * config_.n_embd);
}

void GptModel::check_inputs(const Tensor& ids, const Tensor& targets) const {
  MYRIAD_CHECK(ids.dim() == 2 && ids.dtype() == DType::i32,
               "model: ids must be (B, T) i32, got " << ids.describe());
  MYRIAD_CHECK(ids.size(1) <= config_.block_size,
               "model: sequence length T=" << ids.size(1) << " exceeds block_size " << config_.block_size);
  const Tensor dense = ids.contiguous();
  const std::int32_t* id = dense.data<std::int32_t>();
  for (std::int64_t i = 0; i < dense.numel(); ++i) {
    MYRIAD_CHECK(id[i] >= 0 && id[i] < config_.vocab_size,
                 "model: token id " << id[i] << " at flat position " << i << " is outside the vocabulary [0, "
                                    << config_.vocab_size << ")");
  }
  if (targets.defined()) {
    MYRIAD_CHECK(targets.shape() == ids.shape() && targets.dtype() == DType::i32,
                 "model: targets " << targets.describe() << " must be i32 with the shape of ids " << ids.describe());
  }
}

void GptModel::forward(const Tensor& ids_in) {
  Buffers& b = buffers_;
  const Tensor ids = ids_in.contiguous();
  const int head_unit = config_.n_layer + 1;
  acquire(0, Pass::forward);
  embedding_forward(EmbeddingArgs{}, ids, store_[wte_].value, b.residual[0]);
  if (wpe_ != npos) {
    embedding_forward(EmbeddingArgs{}, b.positions, store_[wpe_].value, b.pos_emb);
    add_into(b.residual[0], b.pos_emb);
  }
  if (!config_.tie_embeddings) release(0, Pass::forward);
  for (std::size_t l = 0; l < blocks_.size(); ++l) {
    acquire(static_cast<int>(l) + 1, Pass::forward);
    blocks_[l].forward(store_, b.residual[l], b.residual[l + 1], b.blocks[l]);
    release(static_cast<int>(l) + 1, Pass::forward);
  }
  acquire(head_unit, Pass::forward);
  const Tensor& last = b.residual.back();
  if (config_.norm == NormKind::layernorm) {
    Tensor bias = store_[norm_b_].value;
    layernorm_forward(LayernormArgs{.eps = config_.norm_eps}, last, store_[norm_w_].value, bias, b.hf, b.hf_mean,
                      b.hf_rstd);
  } else {
    rmsnorm_forward(RmsnormArgs{.eps = config_.norm_eps}, last, store_[norm_w_].value, b.hf, b.hf_rstd);
  }
  Tensor logits = b.logits;
  linear_forward(b.hf.view({b.B * b.T, config_.n_embd}), head_weight(false), Tensor(), logits);
  release(head_unit, Pass::forward);
  if (config_.tie_embeddings) release(0, Pass::forward);
}

LossSum GptModel::loss(const Tensor& targets_in) {
  Buffers& b = buffers_;
  const Tensor targets = targets_in.contiguous().view({b.B * b.T});
  cross_entropy_forward(CrossEntropyArgs{.ignore_index = kIgnoreIndex}, b.logits, targets, b.losses, b.lse);
  LossSum result;
  const float* losses = b.losses.data<float>();
  for (std::int64_t i = 0; i < b.losses.numel(); ++i) result.sum += losses[i];  // ignored rows are 0
  result.tokens = count_valid_targets(targets, kIgnoreIndex);
  return result;
}

LossSum GptModel::forward_loss(const Tensor& ids, const Tensor& targets) {
  check_inputs(ids, targets);
  ensure_buffers(ids.size(0), ids.size(1), buffers_.mode);  // forward only: any mode's buffers serve
  forward(ids);
  return loss(targets);
}

Tensor GptModel::forward_logits(const Tensor& ids) {
  check_inputs(ids, Tensor());
  ensure_buffers(ids.size(0), ids.size(1), buffers_.mode);  // forward only: any mode's buffers serve
  forward(ids);
  return buffers_.logits.view({ids.size(0), ids.size(1), config_.vocab_size}).clone();
}

LossSum GptModel::forward_backward(const Tensor& ids_in, const Tensor& targets, float loss_scale, Recompute mode) {
  check_inputs(ids_in, targets);
  ensure_buffers(ids_in.size(0), ids_in.size(1), mode);
  Buffers& b = buffers_;
  const Tensor ids = ids_in.contiguous();
  forward(ids);
  LossSum result = loss(targets);
  // Loss head backward: dlogits overwrite the logits buffer (the op reads each element first).
  const int head_unit = config_.n_layer + 1;
  acquire(head_unit, Pass::backward);
  if (config_.tie_embeddings) acquire(0, Pass::backward);
  b.grad_losses.fill(loss_scale);
  const Tensor flat_targets = targets.contiguous().view({b.B * b.T});
  cross_entropy_backward(CrossEntropyArgs{.ignore_index = kIgnoreIndex}, b.logits, flat_targets, b.lse,
                         b.grad_losses, b.logits);
  Tensor head_grad = head_weight(true), no_bias;
  Tensor d_hf = b.d_hf.view({b.B * b.T, config_.n_embd});
  linear_backward(b.hf.view({b.B * b.T, config_.n_embd}), head_weight(false), b.logits, d_hf, false, head_grad,
                  no_bias);
  const Tensor& last = b.residual.back();
  if (config_.norm == NormKind::layernorm) {
    Tensor bias_grad = store_[norm_b_].grad;
    layernorm_backward(LayernormArgs{.eps = config_.norm_eps}, last, store_[norm_w_].value, b.hf_mean, b.hf_rstd,
                       b.d_hf, b.grad, store_[norm_w_].grad, bias_grad);
  } else {
    rmsnorm_backward(RmsnormArgs{.eps = config_.norm_eps}, last, store_[norm_w_].value, b.hf_rstd, b.d_hf, b.grad,
                     store_[norm_w_].grad);
  }
  release(head_unit, Pass::backward);
  grads_ready(head_unit);
  for (std::size_t l = blocks_.size(); l-- > 0;) {
    const int unit = static_cast<int>(l) + 1;
    acquire(unit, Pass::backward);
    blocks_[l].recompute(store_, b.residual[l], b.blocks[l], b.scratch, mode);
    blocks_[l].backward(store_, b.residual[l], b.blocks[l], b.scratch, b.grad);
    release(unit, Pass::backward);
    grads_ready(unit);
  }
  const Pass embedding_pass = config_.tie_embeddings ? Pass::backward : Pass::backward_grads;
  if (!config_.tie_embeddings) acquire(0, embedding_pass);
  embedding_backward(EmbeddingArgs{}, ids, b.grad, store_[wte_].grad);
  if (wpe_ != npos) embedding_backward(EmbeddingArgs{}, b.positions, b.grad, store_[wpe_].grad);
  release(0, embedding_pass);
  grads_ready(0);
  return result;
}

}  // namespace myriad::nn
