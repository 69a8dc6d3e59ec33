// GptModel: parameter registration for one rank's split, chunked forward/backward over micro-batch
// slots, the (vocab-parallel) embedding and loss head, buffers per recompute mode.
#include "myriad/nn/gpt_model.h"

#include <cstring>

#include "myriad/core/precision.h"
#include "myriad/dist/tensor_parallel_region.h"
#include "myriad/dist/vocab_parallel.h"
#include "myriad/nn/linear.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/ops/embedding.h"
#include "myriad/ops/norms.h"

namespace myriad::nn {

GptModel::GptModel(const TransformerConfig& config, const ModelSplit& split, bool allocate)
    : config_(config), split_(split) {
  config_.validate();
  const int tp = split_.tp_size();
  MYRIAD_CHECK(config_.n_head % tp == 0 && config_.n_kv_head % tp == 0 && config_.ffn_hidden % tp == 0 &&
                   config_.padded_vocab_size() % tp == 0,
               "model: tp " << tp << " must divide n_head " << config_.n_head << ", n_kv_head " << config_.n_kv_head
                            << ", ffn_hidden " << config_.ffn_hidden << " and the padded vocabulary "
                            << config_.padded_vocab_size());
  if (split_.chunks.empty()) {
    split_.chunks.emplace_back();
    for (int l = 0; l < config_.n_layer; ++l) split_.chunks.back().push_back(l);
  }
  const std::int64_t C = config.n_embd, Vp = config.padded_vocab_size();
  const IndexRange vocab{Vp * split_.tp_rank() / tp, Vp * (split_.tp_rank() + 1) / tp};
  const bool primary_replica = split_.tp_rank() == 0;
  if (split_.first_stage) {
    wte_ = store_.add_shard("wte", {Vp, C}, 0, {vocab}, ParamKind::embedding, ParamInit::normal, config.init_std);
    if (config.positions == PositionKind::learned) {
      wpe_ = store_.add("wpe", {config.block_size, C}, ParamKind::embedding, ParamInit::normal, config.init_std);
      store_.set_primary(wpe_, primary_replica);
    }
  }
  for (const std::vector<int>& layers : split_.chunks) {
    const int first = static_cast<int>(blocks_.size());
    for (int layer : layers) blocks_.emplace_back(config_, split_, layer, store_);
    chunk_blocks_.emplace_back(first, static_cast<int>(blocks_.size()));
  }
  if (split_.last_stage) {
    norm_w_ = store_.add("norm_f.weight", {C}, ParamKind::norm, ParamInit::ones);
    store_.set_primary(norm_w_, primary_replica);
    if (config.norm == NormKind::layernorm) {
      norm_b_ = store_.add("norm_f.bias", {C}, ParamKind::bias, ParamInit::zeros);
      store_.set_primary(norm_b_, primary_replica);
    }
    if (!config.tie_embeddings) {
      head_ = store_.add_shard("lm_head.weight", {Vp, C}, 0, {vocab}, ParamKind::weight, ParamInit::normal,
                               config.init_std);
    } else if (!split_.first_stage) {
      // The last pipeline stage's copy of the tied embedding: same name, so the same initial values;
      // its gradient is summed with the first stage's before every update (the engine's job).
      head_ = store_.add_shard("wte", {Vp, C}, 0, {vocab}, ParamKind::embedding, ParamInit::normal, config.init_std);
      store_.set_primary(head_, false);
    } else {
      head_ = wte_;
    }
  }
  if (allocate) store_.allocate();
  build_units();
}

void GptModel::build_units() {
  // Parameters were registered embeddings, blocks, final norm/head: each unit is the span from its
  // first parameter's offset to the next unit's first offset (the last one to the buffer's end).
  std::vector<std::pair<std::string, std::int64_t>> starts;
  if (wte_ != npos) {
    embedding_unit_ = 0;
    starts.emplace_back("embeddings", store_[wte_].offset);
  }
  for (const TransformerBlock& block : blocks_) {
    const std::string name = "blocks." + std::to_string(block.layer());
    starts.emplace_back(name, store_.find(name + ".norm1.weight").offset);
  }
  if (norm_w_ != npos) {
    head_unit_ = static_cast<int>(starts.size());
    starts.emplace_back("head", store_[norm_w_].offset);
  }
  for (std::size_t u = 0; u < starts.size(); ++u) {
    std::int64_t end = u + 1 < starts.size() ? starts[u + 1].second : store_.numel();
    units_.push_back(ParamUnit{starts[u].first, starts[u].second, end});
  }
}

void GptModel::require_whole_model(const char* what) const {
  MYRIAD_CHECK(num_chunks() == 1 && split_.first_stage && split_.last_stage,
               "model: " << what << " needs every layer on this rank (this rank holds " << blocks_.size() << " of "
                         << config_.n_layer << " layers in " << num_chunks() << " chunk(s))");
}

std::int64_t GptModel::vocab_start() const {
  return config_.padded_vocab_size() * split_.tp_rank() / split_.tp_size();
}

Tensor GptModel::head_weight(bool grad) const {
  const Parameter& p = store_[head_];
  const Tensor& t = grad ? p.grad : p.value;
  if (split_.tp_size() > 1) return t;  // this rank's vocabulary rows; the loss masks the padding
  return t.slice(0, 0, config_.vocab_size);  // real vocabulary rows only
}

GptModel::Slot GptModel::make_slot() const {
  const Buffers& b = buffers_;
  const std::int64_t B = b.B, T = b.T, N = B * T;
  const Shape rows = residual_shape(config_, split_, B, T);
  Slot s;
  for (std::size_t i = 0; i < blocks_.size() + chunk_blocks_.size(); ++i) s.residual.push_back(Tensor::empty(rows));
  std::vector<ActivationSlot> slots = block_activation_slots(config_, split_, B, T);
  BlockActivations shared;
  for (const ActivationSlot& slot : slots) shared.*(slot.member) = Tensor::empty(slot.shape);
  for (std::size_t l = 0; l < blocks_.size(); ++l) {
    BlockActivations acts;
    for (const ActivationSlot& slot : slots) {
      acts.*(slot.member) = slot.kept(b.mode) ? Tensor::empty(slot.shape) : shared.*(slot.member);
    }
    s.blocks.push_back(std::move(acts));
  }
  for (std::size_t c = 0; c < chunk_blocks_.size(); ++c) s.grad.push_back(Tensor::empty(rows));
  if (split_.last_stage) {
    s.hf = Tensor::empty(rows);
    s.hf_mean = Tensor::empty({rows[0] * rows[1]});
    s.hf_rstd = Tensor::empty({rows[0] * rows[1]});
    const std::int64_t V = split_.tp_size() > 1 ? config_.padded_vocab_size() / split_.tp_size() : config_.vocab_size;
    s.logits = Tensor::empty({N, V});
    s.losses = Tensor::empty({N});
    s.lse = Tensor::empty({N});
  }
  return s;
}

void GptModel::prepare(std::int64_t B, std::int64_t T, Recompute mode, int slots) {
  Buffers& b = buffers_;
  if (b.B != B || b.T != T || b.mode != mode || b.slots.empty()) {
    b = Buffers{};
    b.B = B;
    b.T = T;
    b.mode = mode;
    const std::int64_t N = B * T, C = config_.n_embd;
    MYRIAD_CHECK(!split_.sharded_sequence() || N % split_.tp_size() == 0,
                 "sequence parallel: the micro-batch's " << N << " tokens (B " << B << " x T " << T
                                                         << ") must divide evenly over tp " << split_.tp_size());
    b.scratch = make_block_scratch(config_, split_, B, T);
    b.positions = Tensor::empty({B, T}, DType::i32);
    for (std::int64_t i = 0; i < N; ++i) b.positions.data<std::int32_t>()[i] = static_cast<std::int32_t>(i % T);
    const Shape rows = residual_shape(config_, split_, B, T);
    b.row_positions = b.positions;
    if (split_.sharded_sequence()) {
      const std::int64_t first = rows[1] * split_.tp_rank();
      b.row_positions = b.positions.view({N}).slice(0, first, first + rows[1]).view({1, rows[1]});
      b.norm_grads = Tensor::empty({2 * C});
      if (split_.last_stage) b.hf_gathered = Tensor::empty({B, T, C});
    }
    if (config_.positions == PositionKind::learned && split_.first_stage) b.pos_emb = Tensor::empty(rows);
    if (split_.last_stage) {
      b.grad_losses = Tensor::empty({N});
      b.d_hf = Tensor::empty({B, T, C});
    }
  }
  while (static_cast<int>(b.slots.size()) < slots) b.slots.push_back(make_slot());
}

ActivationMemory GptModel::activation_memory(std::int64_t B, std::int64_t T, Recompute mode) const {
  ActivationMemory m;
  const std::int64_t C = config_.n_embd, N = B * T, F = config_.local_ffn(split_.tp_size());
  const Shape rows = residual_shape(config_, split_, B, T);
  const std::int64_t row_count = rows[0] * rows[1];
  std::vector<ActivationSlot> slots = block_activation_slots(config_, split_, B, T);
  std::int64_t own_per_block = 0, shared = 0;
  for (const ActivationSlot& slot : slots) {
    std::int64_t bytes = shape_numel(slot.shape) * 4;
    (slot.kept(mode) ? own_per_block : shared) += bytes;
  }
  const auto local_blocks = static_cast<std::int64_t>(blocks_.size());
  const auto chunks = static_cast<std::int64_t>(chunk_blocks_.size());
  m.saved_bytes = local_blocks * own_per_block + (local_blocks + chunks) * row_count * C * 4;
  if (split_.last_stage) m.saved_bytes += 2 * row_count * 4 /*final norm stats*/ + row_count * C * 4 /*hf*/;
  const std::int64_t tp = split_.tp_size();
  std::int64_t scratch_elements = 2 * N * C /*d_h, d_att upper bound*/ + 2 * row_count * C +
                                  N * config_.local_qkv_width(static_cast<int>(tp)) +
                                  (config_.mlp == MlpKind::swiglu ? 3 : 2) * N * F;
  if (split_.sharded_sequence()) scratch_elements += N * C + 2 * row_count * C + (split_.last_stage ? N * C : 0);
  m.scratch_bytes = shared + scratch_elements * 4;
  if (split_.last_stage) {
    const std::int64_t V = tp > 1 ? config_.padded_vocab_size() / tp : config_.vocab_size;
    m.scratch_bytes += (N * V + 3 * N + N * C) * 4;
  }
  return m;
}

double GptModel::flops_per_token(std::int64_t T) const {
  const double C = static_cast<double>(config_.n_embd), F = static_cast<double>(config_.ffn_hidden);
  const double mlp_matrices = config_.mlp == MlpKind::swiglu ? 3.0 : 2.0;
  const double per_layer = C * static_cast<double>(config_.qkv_width()) + C * C + mlp_matrices * C * F;
  // The head: the untied (padded) lm_head weight, or the tied embedding's real vocabulary rows.
  const double head = static_cast<double>(config_.tie_embeddings ? config_.vocab_size : config_.padded_vocab_size()) * C;
  return 6.0 * (static_cast<double>(config_.n_layer) * per_layer + head) +
         6.0 * static_cast<double>(config_.n_layer * T * config_.n_embd);
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

Tensor GptModel::chunk_input(int chunk, int slot) {
  return buffers_.slots.at(slot).residual.at(static_cast<std::size_t>(chunk_blocks_.at(chunk).first + chunk));
}

Tensor GptModel::chunk_output(int chunk, int slot) {
  return buffers_.slots.at(slot).residual.at(static_cast<std::size_t>(chunk_blocks_.at(chunk).second + chunk));
}

Tensor GptModel::chunk_grad(int chunk, int slot) { return buffers_.slots.at(slot).grad.at(chunk); }

void GptModel::embed(const Tensor& ids_in, Tensor& out) {
  Buffers& b = buffers_;
  const Tensor ids = ids_in.contiguous();
  const std::int64_t N = b.B * b.T, C = config_.n_embd;
  const bool head_shares = head_ == wte_;
  acquire(embedding_unit_, Pass::forward);
  if (split_.tp_size() == 1) {
    embedding_forward(EmbeddingArgs{}, ids, store_[wte_].value, out);
  } else {
    const dist::VocabShard shard{vocab_start(), config_.vocab_size};
    if (split_.sharded_sequence()) {  // every rank's partial lookup, summed into each rank's rows
      Tensor partial = b.scratch.d_h.view({N, C});
      dist::vocab_parallel_embedding_lookup(shard, ids.view({N}), store_[wte_].value, partial);
      dist::reduce_scatter_to_sequence_region_forward(*split_.tp, partial, out);
    } else {
      Tensor flat = out.view({N, C});
      dist::vocab_parallel_embedding_forward(*split_.tp, shard, ids.view({N}), store_[wte_].value, flat);
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
  const Tensor ids = ids_in.contiguous();
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
    embedding_backward(EmbeddingArgs{}, ids, full, store_[wte_].grad);
  } else {
    const dist::VocabShard shard{vocab_start(), config_.vocab_size};
    dist::vocab_parallel_embedding_backward(shard, ids.view({N}), full.view({N, C}), store_[wte_].grad);
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
  linear_forward(head_input(s), head_weight(false), Tensor(), s.logits);
  release(head_unit_, Pass::forward);
  if (head_ == wte_) release(embedding_unit_, Pass::forward);
  LossSum result;
  if (!targets_in.defined()) return result;
  const Tensor targets = targets_in.contiguous().view({N});
  if (split_.tp_size() == 1) {
    cross_entropy_forward(CrossEntropyArgs{.ignore_index = kIgnoreIndex}, s.logits, targets, s.losses, s.lse);
  } else {
    dist::vocab_parallel_cross_entropy_forward(*split_.tp, dist::VocabShard{vocab_start(), config_.vocab_size},
                                               s.logits, targets, kIgnoreIndex, s.losses, s.lse);
  }
  const float* losses = s.losses.data<float>();
  for (std::int64_t i = 0; i < N; ++i) result.sum += losses[i];  // ignored rows are 0
  result.tokens = count_valid_targets(targets, kIgnoreIndex);
  return result;
}

void GptModel::head_backward(Slot& s, const Tensor& targets_in, float loss_scale, Tensor& grad) {
  Buffers& b = buffers_;
  const std::int64_t N = b.B * b.T, C = config_.n_embd;
  acquire(head_unit_, Pass::backward);
  if (head_ == wte_) acquire(embedding_unit_, Pass::backward);
  b.grad_losses.fill(loss_scale);
  const Tensor targets = targets_in.contiguous().view({N});
  // dlogits overwrite the logits buffer (the op reads each element first).
  if (split_.tp_size() == 1) {
    cross_entropy_backward(CrossEntropyArgs{.ignore_index = kIgnoreIndex}, s.logits, targets, s.lse, b.grad_losses,
                           s.logits);
  } else {
    dist::vocab_parallel_cross_entropy_backward(dist::VocabShard{vocab_start(), config_.vocab_size}, s.logits, targets,
                                                kIgnoreIndex, s.lse, b.grad_losses, s.logits);
  }
  Tensor head_grad = head_weight(true), no_bias;
  Tensor d_hf = b.d_hf.view({N, C});
  linear_backward(head_input(s), head_weight(false), s.logits, d_hf, false, head_grad, no_bias);
  Tensor d_rows = b.d_hf;  // sum the vocabulary shards' contributions over tp
  if (split_.sharded_sequence()) {
    d_rows = b.scratch.d_hs;
    dist::gather_from_sequence_region_backward(*split_.tp, b.d_hf, d_rows);
  } else if (split_.tp_size() > 1) {
    dist::copy_to_tp_region_backward(*split_.tp, b.d_hf);
  }
  // Sequence parallel: the final norm's gradients are partial sums over this rank's rows.
  const bool partial = split_.sharded_sequence();
  if (partial) std::memset(b.norm_grads.raw_data(), 0, b.norm_grads.nbytes());
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

LossSum GptModel::forward_chunk(int chunk, int slot_index, const Tensor& ids, const Tensor& targets) {
  Buffers& b = buffers_;
  Slot& s = b.slots.at(slot_index);
  const auto [first, last] = chunk_blocks_.at(chunk);
  if (chunk_is_first(chunk)) {
    embed(ids, s.residual[static_cast<std::size_t>(first + chunk)]);
    round_to_precision(s.residual[static_cast<std::size_t>(first + chunk)], activation_precision_);
  }
  const int block_unit0 = embedding_unit_ >= 0 ? 1 : 0;
  for (int i = first; i < last; ++i) {
    const auto r = static_cast<std::size_t>(i + chunk);
    acquire(block_unit0 + i, Pass::forward);
    blocks_[i].forward(store_, s.residual[r], s.residual[r + 1], s.blocks[i], b.scratch);
    round_to_precision(s.residual[r + 1], activation_precision_);
    release(block_unit0 + i, Pass::forward);
  }
  return chunk_is_last(chunk) ? head_forward(s, targets) : LossSum{};
}

void GptModel::backward_chunk(int chunk, int slot_index, const Tensor& ids, const Tensor& targets, float loss_scale) {
  Buffers& b = buffers_;
  Slot& s = b.slots.at(slot_index);
  Tensor& grad = s.grad.at(chunk);
  if (chunk_is_last(chunk)) {
    head_backward(s, targets, loss_scale, grad);
    round_to_precision(grad, activation_precision_);
  }
  const auto [first, last] = chunk_blocks_.at(chunk);
  const int block_unit0 = embedding_unit_ >= 0 ? 1 : 0;
  for (int i = last; i-- > first;) {
    const auto r = static_cast<std::size_t>(i + chunk);
    acquire(block_unit0 + i, Pass::backward);
    blocks_[i].recompute(store_, s.residual[r], s.blocks[i], b.scratch, b.mode);
    blocks_[i].backward(store_, s.residual[r], s.blocks[i], b.scratch, grad);
    round_to_precision(grad, activation_precision_);
    release(block_unit0 + i, Pass::backward);
    grads_ready(block_unit0 + i);
  }
  if (chunk_is_first(chunk)) embed_backward(ids, grad);
}

LossSum GptModel::forward_loss(const Tensor& ids, const Tensor& targets) {
  require_whole_model("forward_loss");
  check_inputs(ids, targets);
  prepare(ids.size(0), ids.size(1), buffers_.mode, 1);  // forward only: any mode's buffers serve
  return forward_chunk(0, 0, ids, targets);
}

Tensor GptModel::forward_logits(const Tensor& ids) {
  require_whole_model("forward_logits");
  MYRIAD_CHECK(split_.tp_size() == 1, "model: forward_logits needs the whole vocabulary (tp 1)");
  check_inputs(ids, Tensor());
  prepare(ids.size(0), ids.size(1), buffers_.mode, 1);
  forward_chunk(0, 0, ids, Tensor());
  return buffers_.slots[0].logits.view({ids.size(0), ids.size(1), config_.vocab_size}).clone();
}

LossSum GptModel::forward_backward(const Tensor& ids, const Tensor& targets, float loss_scale, Recompute mode) {
  require_whole_model("forward_backward");
  check_inputs(ids, targets);
  prepare(ids.size(0), ids.size(1), mode, 1);
  LossSum result = forward_chunk(0, 0, ids, targets);
  backward_chunk(0, 0, ids, targets, loss_scale);
  return result;
}

}  // namespace myriad::nn
