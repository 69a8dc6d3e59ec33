// GptModel: parameter registration for one rank's split, micro-batch slot buffers per recompute
// mode, and the chunked forward/backward (embedding and loss head: gpt_model_head.cpp).
#include "myriad/nn/gpt_model.h"
#include "myriad/nn/host_tokens.h"

#include <algorithm>
#include <cstring>

#include "myriad/nn/linear.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/ops/embedding.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/norms.h"

namespace myriad::nn {

namespace {

// The embedding's (and an untied head's) rows: the padded vocabulary by n_embd.
ParameterSpec vocabulary_spec(const TransformerConfig& c, const std::string& name) {
  return {
      .name = name, .shape = {c.padded_vocab_size(), c.n_embd}, .kind = ParamKind::embedding, .init_std = c.init_std};
}

}  // namespace

GptModel::GptModel(const TransformerConfig& config, const ModelSplit& split, bool allocate, ops::Placement placement)
    : config_(config), split_(split), placement_(placement), losses_(placement) {
  config_.validate();
  if (split_.chunks.empty()) {
    split_.chunks.emplace_back();
    for (int l = 0; l < config_.n_layer; ++l) split_.chunks.back().push_back(l);
  }
  const std::int64_t C = config.n_embd;
  // Each parameter declared whole; the shard plan decides this rank's part (shard_plan.h).
  auto declare = [&](const ParameterSpec& spec) {
    return parallelize(spec, split_.shard_plan(), split_.shard_coordinate(), store_);
  };
  const ParameterSpec vocabulary = vocabulary_spec(config_, "wte");
  vocabulary_ = split_.shard_plan().place(vocabulary, split_.shard_coordinate()).ranges.at(0);
  if (split_.first_stage) {
    wte_ = declare(vocabulary);
    if (config.positions == PositionKind::learned) {
      wpe_ = declare({.name = "wpe",
                      .shape = {config.context_length, C},
                      .kind = ParamKind::embedding,
                      .init_std = config.init_std});
    }
  }
  for (const std::vector<int>& layers : split_.chunks) {
    const int first = static_cast<int>(blocks_.size());
    for (int layer : layers) blocks_.emplace_back(config_, split_, layer, store_);
    chunk_blocks_.emplace_back(first, static_cast<int>(blocks_.size()));
  }
  if (split_.last_stage) {
    norm_w_ = declare({.name = "norm_f.weight", .shape = {C}, .kind = ParamKind::norm, .init = ParamInit::ones});
    if (config.norm == NormKind::layernorm) {
      norm_b_ = declare({.name = "norm_f.bias", .shape = {C}, .kind = ParamKind::bias, .init = ParamInit::zeros});
    }
    if (!config.tie_embeddings) {
      ParameterSpec head = vocabulary_spec(config_, "lm_head.weight");
      head.kind = ParamKind::weight;
      head_ = declare(head);
    } else if (!split_.first_stage) {
      // The last pipeline stage's copy of the tied embedding: same name, so the same initial values;
      // its gradient is summed with the first stage's before every update (the engine's job).
      ParameterSpec copy = vocabulary;
      copy.stage_copy = true;
      head_ = declare(copy);
    } else {
      head_ = wte_;
    }
  }
  if (allocate) store_.allocate(placement_);
  build_units();
}

void GptModel::set_activation_precision(DType format) {
  activation_precision_ = format;
  for (TransformerBlock& block : blocks_) block.set_gemm_operands(format);
  release_buffers();  // the kept GEMM inputs' format changes with it
}

void GptModel::enable_fp8(const Fp8Recipe& recipe) {
  fp8_ = std::make_unique<Fp8Scaling>(recipe, static_cast<std::int64_t>(config_.n_layer) * kFp8LinearsPerBlock,
                                      placement_);
  for (TransformerBlock& block : blocks_) block.set_fp8_scaling(fp8_.get());
  release_buffers();
}

// FP8 GEMMs quantise their inputs from f32 (nn/fp8_linear.h): the GEMM inputs stay f32 there.
DType GptModel::kept_gemm_input_format() const { return fp8_ ? DType::f32 : activation_precision_; }

// The head GEMM's input hf: only GEMMs read it, kept as the blocks' GEMM inputs are (f32 under
// sequence parallelism, whose gather carries f32 rows).
DType GptModel::head_input_format() const { return split_.sharded_sequence() ? DType::f32 : kept_gemm_input_format(); }

void GptModel::release_buffers() {
  if (buffers_.slots.empty()) return;
  buffers_ = Buffers{};
  ++buffers_generation_;
}

void GptModel::build_units() {
  // Parameters were registered embeddings, blocks (an MoE block's experts last), final norm/head:
  // each unit is the span from its first parameter's offset to the next unit's first offset (the
  // last one to the buffer's end).
  struct Start {
    std::string name;
    std::int64_t offset;
    bool expert;
  };
  std::vector<Start> starts;
  if (wte_ != npos) {
    embedding_unit_ = 0;
    starts.push_back({"embeddings", store_[wte_].offset, false});
  }
  for (const TransformerBlock& block : blocks_) {
    const std::string name = "blocks." + std::to_string(block.layer());
    const int unit = static_cast<int>(starts.size());
    starts.push_back({name, store_.find(name + ".norm1.weight").offset, false});
    int experts = -1;
    if (const MoeLayer* moe = block.moe()) {
      experts = static_cast<int>(starts.size());
      starts.push_back({name + ".experts", store_[moe->first_expert_parameter()].offset, true});
      moe_stat_of_block_.push_back(static_cast<int>(moe_stats_.size()));
      MoeLayerStats stats;
      stats.layer = block.layer();
      moe_stats_.push_back(std::move(stats));
    } else {
      moe_stat_of_block_.push_back(-1);
    }
    block_units_.emplace_back(unit, experts);
  }
  if (norm_w_ != npos) {
    head_unit_ = static_cast<int>(starts.size());
    starts.push_back({"head", store_[norm_w_].offset, false});
  }
  for (std::size_t u = 0; u < starts.size(); ++u) {
    std::int64_t end = u + 1 < starts.size() ? starts[u + 1].offset : store_.numel();
    units_.push_back(ParamUnit{starts[u].name, starts[u].offset, end, starts[u].expert});
  }
}

void GptModel::acquire_block(int i, Pass pass) {
  acquire(block_units_[i].first, pass);
  acquire(block_units_[i].second, pass);
}

void GptModel::release_block(int i, Pass pass) {
  release(block_units_[i].second, pass);
  release(block_units_[i].first, pass);
}

void GptModel::reset_moe_stats() {
  if (moe_totals_.defined()) zero(moe_totals_);  // where the model computes: nothing waits
  for (MoeLayerStats& stats : moe_stats_) stats.assignments = stats.sequences = stats.tokens = 0;
}

BlockSelectionStats GptModel::attention_stats() const {
  BlockSelectionStats stats = attention_stats_;
  if (selection_totals_.defined()) stats.add(selection_stats(placement_.to_host(selection_totals_)));
  return stats;
}

GptModel::HostCounts GptModel::host_counts() const {
  HostCounts counts{.attention = attention_stats_, .moe = {}};
  for (const MoeLayerStats& layer : moe_stats_)
    counts.moe.push_back({layer.assignments, layer.sequences, layer.tokens});
  return counts;
}

void GptModel::add_host_counts(const HostCounts& counts) {
  attention_stats_.add(counts.attention);
  MYRIAD_CHECK(counts.moe.size() == moe_stats_.size(),
               "add_host_counts: " << counts.moe.size() << " MoE rows for " << moe_stats_.size() << " MoE layers");
  for (std::size_t i = 0; i < moe_stats_.size(); ++i) {
    moe_stats_[i].assignments += counts.moe[i][0];
    moe_stats_[i].sequences += counts.moe[i][1];
    moe_stats_[i].tokens += counts.moe[i][2];
  }
}

void GptModel::reset_attention_stats() {
  attention_stats_ = BlockSelectionStats{};
  if (selection_totals_.defined()) zero(selection_totals_);  // where the model computes: nothing waits
}

Tensor GptModel::moe_totals_on_host() const {
  return moe_totals_.defined() ? placement_.to_host(moe_totals_) : Tensor();
}

void GptModel::require_whole_model(const char* what) const {
  MYRIAD_CHECK(num_chunks() == 1 && split_.first_stage && split_.last_stage,
               "model: " << what << " needs every layer on this rank (this rank holds " << blocks_.size() << " of "
                         << config_.n_layer << " layers in " << num_chunks() << " chunk(s))");
}

GptModel::Slot GptModel::make_slot() const {
  const Buffers& b = buffers_;
  const std::int64_t B = b.B, T = b.T, N = B * T;
  const Shape rows = residual_shape(config_, split_, B, T);
  Slot s;
  for (std::size_t i = 0; i < blocks_.size() + chunk_blocks_.size(); ++i) {
    s.residual.push_back(placement_.empty(rows, activation_precision_));
  }
  std::vector<ActivationSlot> slots = block_activation_slots(config_, split_, B, T, kept_gemm_input_format());
  for (const TransformerBlock& block : blocks_) {
    BlockActivations acts;
    const bool moe = block.moe() != nullptr;
    for (const ActivationSlot& slot : slots) {
      if (moe && slot.dense_mlp) continue;
      acts.*(slot.member) = slot.kept(b.mode) ? placement_.empty(slot.shape, slot.dtype) : b.shared.*(slot.member);
    }
    if (moe) acts.moe = std::make_shared<MoeActivations>();
    s.blocks.push_back(std::move(acts));
  }
  for (std::size_t c = 0; c < chunk_blocks_.size(); ++c)
    s.grad.push_back(placement_.empty(rows, activation_precision_));
  if (split_.last_stage) {
    s.hf = placement_.empty(rows, head_input_format());
    s.hf_mean = placement_.empty({rows[0] * rows[1]});
    s.hf_rstd = placement_.empty({rows[0] * rows[1]});
    s.logits = placement_.empty({N, logits_width()});
    s.losses = placement_.empty({N});
    s.lse = placement_.empty({N});
  }
  return s;
}

void GptModel::prepare(std::int64_t B, std::int64_t T, Recompute mode, int slots) {
  Buffers& b = buffers_;
  if (b.B != B || b.T != T || b.mode != mode || b.slots.empty()) {
    b = Buffers{};
    ++buffers_generation_;
    b.B = B;
    b.T = T;
    b.mode = mode;
    const std::int64_t N = B * T, C = config_.n_embd;
    MYRIAD_CHECK(!split_.sharded_sequence() || N % split_.tp_size() == 0,
                 "sequence parallel: the micro-batch's " << N << " tokens (B " << B << " x T " << T
                                                         << ") must divide evenly over tp " << split_.tp_size());
    b.scratch = make_block_scratch(placement_, config_, split_, B, T, kept_gemm_input_format());
    const bool any_dense = std::any_of(blocks_.begin(), blocks_.end(),
                                       [](const TransformerBlock& block) { return block.moe() == nullptr; });
    for (const ActivationSlot& slot : block_activation_slots(config_, split_, B, T, kept_gemm_input_format())) {
      if (!slot.kept(mode) && (any_dense || !slot.dense_mlp)) {
        b.shared.*(slot.member) = placement_.empty(slot.shape, slot.dtype);
      }
    }
    Tensor positions = Tensor::empty({B, T}, DType::i32);
    const ContextParallel& cp = split_.context_parallel();  // global positions of the local rows
    MYRIAD_CHECK(cp.size() == 1 || T % 2 == 0, "context parallelism: a local sequence of "
                                                   << T << " rows is not this rank's two equal chunks (cp " << cp.size()
                                                   << ")");
    for (std::int64_t i = 0; i < N; ++i) {
      positions.data<std::int32_t>()[i] = static_cast<std::int32_t>(cp.global_position(i % T, T));
    }
    b.positions = placement_.from_host(positions);
    const Shape rows = residual_shape(config_, split_, B, T);
    b.row_positions = b.positions;
    if (split_.sharded_sequence()) {
      const std::int64_t first = rows[1] * split_.tp_rank();
      b.row_positions = b.positions.view({N}).slice(0, first, first + rows[1]).view({1, rows[1]});
      if (split_.last_stage) b.hf_gathered = placement_.empty({B, T, C});
    }
    if (split_.last_stage) b.norm_grads = placement_.empty({2 * C});
    if (activation_precision_ != DType::f32) b.grad_work = placement_.empty(rows);
    if (config_.positions == PositionKind::learned && split_.first_stage) b.pos_emb = placement_.empty(rows);
    if (split_.last_stage) {
      b.grad_losses = placement_.empty({N});
      b.d_hf = placement_.empty({B, T, C});
    }
  }
  while (static_cast<int>(b.slots.size()) < slots) b.slots.push_back(make_slot());
}

ActivationMemory GptModel::activation_memory(std::int64_t B, std::int64_t T, Recompute mode) const {
  ActivationMemory m;
  const LocalWidths widths = local_widths(config_, split_);
  const std::int64_t C = config_.n_embd, N = B * T, F = widths.ffn;
  const Shape rows = residual_shape(config_, split_, B, T);
  const std::int64_t row_count = rows[0] * rows[1];
  std::vector<ActivationSlot> slots = block_activation_slots(config_, split_, B, T, kept_gemm_input_format());
  std::int64_t own_per_block = 0, shared = 0;
  const bool any_dense =
      std::any_of(blocks_.begin(), blocks_.end(), [](const TransformerBlock& block) { return block.moe() == nullptr; });
  auto slot_bytes = [](const ActivationSlot& slot) {
    return shape_numel(slot.shape) * static_cast<std::int64_t>(dtype_size(slot.dtype));
  };
  for (const ActivationSlot& slot : slots) {
    std::int64_t bytes = slot_bytes(slot);
    if (slot.kept(mode)) {
      own_per_block += bytes;
    } else if (any_dense || !slot.dense_mlp) {
      shared += bytes;  // one set for every slot (prepare)
    }
  }
  const auto local_blocks = static_cast<std::int64_t>(blocks_.size());
  const auto chunks = static_cast<std::int64_t>(chunk_blocks_.size());
  const auto residual_bytes = static_cast<std::int64_t>(dtype_size(activation_precision_));
  m.saved_bytes = local_blocks * own_per_block + (local_blocks + chunks) * row_count * C * residual_bytes;
  // MoE blocks keep no dense MLP activations but their experts' (sized by the routing: at most
  // N top_k rows without an exchange; counted at that bound), the router logits and shared experts
  // — under full recompute only while the block's backward runs (scratch, one block at a time).
  const std::int64_t mlp_matrices = config_.mlp == MlpKind::swiglu ? 3 : 2;
  const std::int64_t Fe = config_.expert_ffn(), k = config_.moe.top_k, E = config_.moe.num_experts;
  const std::int64_t moe_bytes =
      (N * k * (2 * C + mlp_matrices * Fe) + N * E + config_.moe.shared_experts * N * Fe * mlp_matrices) * 4;
  bool any_moe = false;
  for (const TransformerBlock& block : blocks_) {
    if (!block.moe()) continue;
    any_moe = true;
    for (const ActivationSlot& slot : slots) {
      if (slot.dense_mlp && slot.kept(mode)) m.saved_bytes -= slot_bytes(slot);
    }
    if (mode != Recompute::full) m.saved_bytes += moe_bytes;
  }
  if (split_.last_stage) {
    const auto hf_bytes = static_cast<std::int64_t>(dtype_size(head_input_format()));
    m.saved_bytes += 2 * row_count * 4 /*final norm stats*/ + row_count * C * hf_bytes /*hf*/;
  }
  // The block scratch (make_block_scratch), the kept gradients in their formats.
  const BlockGradientFormats grads = block_gradient_formats(config_, split_, kept_gemm_input_format());
  const auto bytes_of = [](DType t) { return static_cast<std::int64_t>(dtype_size(t)); };
  const std::int64_t d_att = N * widths.heads * widths.head_dim;
  std::int64_t scratch = (N * C + 2 * row_count * C + N * F) * 4 /*d_h, d_tmp, y_wide, d_act*/ +
                         (d_att + N * widths.qkv()) * bytes_of(grads.attention) +
                         (config_.mlp == MlpKind::swiglu ? 2 : 1) * N * F * bytes_of(grads.mlp) + 4 * C * 4;
  if (split_.sharded_sequence()) scratch += (N * C + 2 * row_count * C + (split_.last_stage ? N * C : 0)) * 4;
  m.scratch_bytes = shared + scratch + (any_moe && mode == Recompute::full ? moe_bytes : 0);
  if (split_.last_stage) {
    const std::int64_t V = vocabulary_.size();  // logits over this rank's padded vocabulary
    m.scratch_bytes += (N * V + 3 * N + N * C) * 4;
  }
  return m;
}

namespace {

// Weight elements a token multiplies by in one block: attention, then the dense MLP or (MoE) the
// router, its top_k experts and the shared experts.
double active_block_weights(const TransformerConfig& c, int layer) {
  const double C = static_cast<double>(c.n_embd);
  const double mlp_matrices = c.mlp == MlpKind::swiglu ? 3.0 : 2.0;
  const double attention = C * static_cast<double>(c.qkv_width()) + C * C;
  if (!c.moe.is_moe_layer(layer)) return attention + mlp_matrices * C * static_cast<double>(c.ffn_hidden);
  const double expert = mlp_matrices * C * static_cast<double>(c.expert_ffn());
  return attention + static_cast<double>(c.moe.num_experts) * C +
         static_cast<double>(c.moe.top_k + c.moe.shared_experts) * expert;
}

}  // namespace

double GptModel::flops_per_token(std::int64_t T) const {
  double weights = 0.0;
  for (int l = 0; l < config_.n_layer; ++l) weights += active_block_weights(config_, l);
  // The head: the untied (padded) lm_head weight, or the tied embedding's real vocabulary rows.
  const double C = static_cast<double>(config_.n_embd);
  const double head =
      static_cast<double>(config_.tie_embeddings ? config_.vocab_size : config_.padded_vocab_size()) * C;
  // Attention: scores and values, 2 * 2 * C per visible key forward, times 3 with backward.
  return 6.0 * (weights + head) +
         12.0 * static_cast<double>(config_.n_layer * config_.n_embd) * config_.attention.mean_keys_per_query(T);
}

std::int64_t GptModel::active_parameters() const {
  double weights = 0.0;
  for (int l = 0; l < config_.n_layer; ++l) weights += active_block_weights(config_, l);
  const double C = static_cast<double>(config_.n_embd);
  weights += static_cast<double>(config_.padded_vocab_size()) * C * (config_.tie_embeddings ? 1.0 : 2.0);
  return static_cast<std::int64_t>(weights);
}

void GptModel::check_inputs(const Tensor& ids, const Tensor& targets) const {
  MYRIAD_CHECK(ids.dim() == 2 && ids.dtype() == DType::i32, "model: ids must be (B, T) i32, got " << ids.describe());
  MYRIAD_CHECK(ids.size(1) <= config_.context_length,
               "model: sequence length T=" << ids.size(1) << " exceeds context_length " << config_.context_length);
  (void)checked_host_tokens("model", "token id", ids, config_.vocab_size);
  if (targets.defined()) {
    MYRIAD_CHECK(targets.shape() == ids.shape() && targets.dtype() == DType::i32,
                 "model: targets " << targets.describe() << " must be i32 with the shape of ids " << ids.describe());
  }
}

Tensor GptModel::chunk_input(int chunk, int slot) {
  return buffers_.slots.at(slot).residual.at(static_cast<std::size_t>(chunk_blocks_.at(chunk).first) +
                                             static_cast<std::size_t>(chunk));
}

Tensor GptModel::chunk_output(int chunk, int slot) {
  return buffers_.slots.at(slot).residual.at(static_cast<std::size_t>(chunk_blocks_.at(chunk).second) +
                                             static_cast<std::size_t>(chunk));
}

Tensor GptModel::chunk_grad(int chunk, int slot) { return buffers_.slots.at(slot).grad.at(chunk); }

std::int64_t GptModel::forward_chunk(int chunk, int slot_index, const Tensor& ids, const Tensor& targets) {
  Buffers& b = buffers_;
  Slot& s = b.slots.at(slot_index);
  const auto [first, last] = chunk_blocks_.at(chunk);
  if (chunk_is_first(chunk)) {
    embed(ids, s.residual[static_cast<std::size_t>(first) + static_cast<std::size_t>(chunk)]);
  }
  for (int i = first; i < last; ++i) {
    const auto r = static_cast<std::size_t>(i) + static_cast<std::size_t>(chunk);
    acquire_block(i, Pass::forward);
    if (moe_stat_of_block_[i] >= 0 && recording_stats_) {  // the routing adds the layer's totals
      const auto row = static_cast<std::int64_t>(moe_stat_of_block_[i]);
      if (!moe_totals_.defined()) {
        moe_totals_ =
            placement_.zeros({static_cast<std::int64_t>(moe_stats_.size()), config_.moe.num_experts + 3}, DType::f64);
      }
      moe_stats_[row].totals = moe_totals_.slice(0, row, row + 1).view({config_.moe.num_experts + 3});
      s.blocks[i].moe->stats = moe_stats_[row].totals;
    }
    if (recording_stats_ && !placement_.on_host() && config_.attention.selects()) {  // the selection adds its stats
      if (!selection_totals_.defined()) selection_totals_ = placement_.zeros({5}, DType::f64);
      s.blocks[i].selection_totals = selection_totals_;
    }
    blocks_[i].forward(store_, s.residual[r], s.residual[r + 1], s.blocks[i], b.scratch);
    s.blocks[i].selection_totals = Tensor();  // a recompute's forward adds nothing
    release_block(i, Pass::forward);
    if (recording_stats_) attention_stats_.add(s.blocks[i].selection);
    if (moe_stat_of_block_[i] >= 0) {
      if (recording_stats_) {
        const MoeActivations& moe = *s.blocks[i].moe;
        moe_stats_[moe_stat_of_block_[i]].count(moe.logits.size(0), moe.route);
      }
      // Full recompute keeps only the block's input: the expert activations are rebuilt (and the
      // tokens routed again, identically) by recompute() before the block's backward.
      if (b.mode == Recompute::full) s.blocks[i].moe->release();
    }
  }
  return chunk_is_last(chunk) ? head_forward(s, targets) : 0;
}

void GptModel::backward_chunk(int chunk, int slot_index, const Tensor& ids, const Tensor& targets, float loss_scale) {
  Buffers& b = buffers_;
  Slot& s = b.slots.at(slot_index);
  // The chunk's gradient in f32 while its blocks run; under a 16-bit stream the slot's message
  // buffer holds it between chunks (received widened, sent narrowed: values of the format, exact).
  Tensor& message = s.grad.at(chunk);
  Tensor grad = message.dtype() == DType::f32 ? message : b.grad_work;
  if (chunk_is_last(chunk)) {
    head_backward(s, targets, loss_scale, grad);
    round_to_format(grad, activation_precision_);
  } else if (grad.raw_data() != message.raw_data()) {
    copy(message, grad);
  }
  const auto [first, last] = chunk_blocks_.at(chunk);
  // Staged inputs (a recorded micro-batch): the MoE routers read the seed write_loss_scale() staged.
  const AuxLossScale aux_scale{loss_scale, inputs_staged_ ? b.grad_losses.slice(0, 0, 1) : Tensor()};
  for (int i = last; i-- > first;) {
    const auto r = static_cast<std::size_t>(i) + static_cast<std::size_t>(chunk);
    acquire_block(i, Pass::backward);
    blocks_[i].recompute(store_, s.residual[r], s.blocks[i], b.scratch, b.mode);
    blocks_[i].backward(store_, s.residual[r], s.blocks[i], b.scratch, grad, aux_scale);
    round_to_format(grad, activation_precision_);
    release_block(i, Pass::backward);
    grads_ready(block_units_[i].second);
    grads_ready(block_units_[i].first);
  }
  if (chunk_is_first(chunk)) {
    embed_backward(ids, grad);
  } else if (grad.raw_data() != message.raw_data()) {
    copy(grad, message);
  }
}

LossSum GptModel::forward_loss(const Tensor& ids, const Tensor& targets) {
  require_whole_model("forward_loss");
  check_inputs(ids, targets);
  prepare(ids.size(0), ids.size(1), buffers_.mode, 1);  // forward only: any mode's buffers serve
  losses_.clear();
  LossSum result;
  result.tokens = forward_chunk(0, 0, ids, targets);
  result.sum = losses_.take();
  return result;
}

Tensor GptModel::forward_logits(const Tensor& ids) {
  require_whole_model("forward_logits");
  MYRIAD_CHECK(split_.tp_size() == 1, "model: forward_logits needs the whole vocabulary (tp 1)");
  check_inputs(ids, Tensor());
  prepare(ids.size(0), ids.size(1), buffers_.mode, 1);
  forward_chunk(0, 0, ids, Tensor());
  const Tensor& logits = buffers_.slots[0].logits;
  const Tensor host = placement_.on_host() ? logits : placement_.to_host(logits);
  return host.slice(1, 0, config_.vocab_size).clone().view({ids.size(0), ids.size(1), config_.vocab_size});  // a copy
}

LossSum GptModel::forward_backward(const Tensor& ids, const Tensor& targets, float loss_scale, Recompute mode) {
  require_whole_model("forward_backward");
  check_inputs(ids, targets);
  prepare(ids.size(0), ids.size(1), mode, 1);
  losses_.clear();
  LossSum result;
  result.tokens = forward_chunk(0, 0, ids, targets);
  backward_chunk(0, 0, ids, targets, loss_scale);
  result.sum = losses_.take();
  return result;
}

}  // namespace myriad::nn
