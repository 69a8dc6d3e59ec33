// ModelConfig: its key table, the derived sizes and the model-only consistency checks.
#include "myriad/config/model_config.h"

#include "myriad/core/error.h"

namespace myriad {

const std::vector<Field<ModelConfig>>& ModelConfig::fields() {
  using M = ModelConfig;
  static const std::vector<Field<M>> table = {
      make_field("architecture", &M::architecture,
                 "model family: gpt2 (LayerNorm, GELU, learned positions) or llama (RMSNorm, SwiGLU, RoPE)"),
      make_field("vocab_size", &M::vocab_size, "tokenizer vocabulary size V (padded to a multiple of 64 in the model)",
                 {.check = at_least(1)}),
      make_field("n_layer", &M::n_layer, "transformer blocks", {.check = at_least(1)}),
      make_field("n_head", &M::n_head, "attention (query) heads; must divide n_embd", {.check = at_least(1)}),
      make_field("n_kv_head", &M::n_kv_head,
                 "key/value heads (grouped-query attention); 0 = n_head; must divide n_head", {.check = at_least(0)}),
      make_field("n_embd", &M::n_embd, "channels C (embedding width)", {.check = at_least(1)}),
      make_field("context_length", &M::context_length, "maximum sequence length (positions)", {.check = at_least(1)}),
      make_field("ffn_hidden", &M::ffn_hidden,
                 "MLP hidden width; 0 = derived: 4*n_embd (gpt2), round_up(8*n_embd/3, 64) (llama)",
                 {.check = at_least(0)}),
      make_field("norm_eps", &M::norm_eps,
                 "epsilon of LayerNorm / RMSNorm; the default is GPT-2's (and LLaMA 2's); LLaMA (1) used 1e-6, set in "
                 "configs/llama_tiny.yaml",
                 {.check = greater_than(0)}),
      make_field("rope_theta", &M::rope_theta, "RoPE base frequency (llama)", {.check = greater_than(0)}),
      make_field("tie_embeddings", &M::tie_embeddings,
                 "LM head shares the token embedding; auto = true for gpt2, false for llama"),
      make_field("bias", &M::bias,
                 "biases of the linear layers: q/k/v, the attention's output, the MLP's first matrix (SwiGLU's gate; "
                 "its up matrix has none) and the MLP's output. LayerNorms keep theirs either way, RMSNorms have none; "
                 "auto = true for gpt2, false for llama"),
      make_field("init_std", &M::init_std,
                 "std of the normal initialisation of weights; the matrices that write into the residual stream "
                 "(attention and MLP outputs) use init_std / sqrt(2 * n_layer), as GPT-2",
                 {.check = greater_than(0)}),
      make_field("moe_base", &M::moe_base,
                 "moe: the dense family the blocks follow (llama: RMSNorm, RoPE, SwiGLU experts; gpt2: LayerNorm, "
                 "learned positions, GELU experts)"),
      make_field("num_experts", &M::num_experts, "moe: experts per MoE layer", {.check = at_least(0)}),
      make_field("top_k", &M::top_k, "moe: experts each token is routed to (1..8); 0 = 2", {.check = at_least(0)}),
      make_field("expert_capacity", &M::expert_capacity,
                 "moe: tokens one expert takes from one sequence (later tokens over it are dropped); 0 = from "
                 "capacity_factor",
                 {.check = at_least(0)}),
      make_field("capacity_factor", &M::capacity_factor,
                 "moe: capacity = ceil(capacity_factor * seq_len * top_k / num_experts) per sequence; auto = 1.25",
                 {.check = greater_than(0)}),
      make_field("dropless", &M::dropless, "moe: no capacity, every routed token is computed"),
      make_field("router_scores", &M::router_scores,
                 "moe: router scores, softmax over the experts or sigmoid per expert"),
      make_field("normalize_top_k", &M::normalize_top_k, "moe: combine weights = the chosen scores / their sum"),
      make_field("aux_loss_coef", &M::aux_loss_coef, "moe: load-balancing loss coefficient", {.check = at_least(0)}),
      make_field("z_loss_coef", &M::z_loss_coef, "moe: router z-loss coefficient", {.check = at_least(0)}),
      make_field("shared_experts", &M::shared_experts, "moe: always-on experts every token uses",
                 {.check = at_least(0)}),
      make_field("moe_every", &M::moe_every, "moe: blocks whose (layer + 1) % moe_every == 0 have experts",
                 {.check = at_least(1)}),
      make_field("expert_ffn_hidden", &M::expert_ffn_hidden,
                 "moe: hidden width of one expert; 0 = the MLP width in use (ffn_hidden)", {.check = at_least(0)}),
      make_field("attention.kind", &M::attention_kind,
                 "dense: every earlier position; block_sparse: the blocks of a fixed pattern plus, with "
                 "sparse_ratio > 0, blocks selected per head (docs/config.md, Block-sparse attention)"),
      make_field("attention.block_size", &M::attention_block_size, "block_sparse: positions per block",
                 {.check = at_least(1)}),
      make_field("attention.local_blocks", &M::local_blocks,
                 "block_sparse: blocks before the diagonal one every query block reads (sliding window)",
                 {.check = at_least(0)}),
      make_field("attention.global_blocks", &M::global_blocks,
                 "block_sparse: the sequence's first blocks, read by every query block (attention sinks)",
                 {.check = at_least(0)}),
      make_field("attention.stride_blocks", &M::stride_blocks,
                 "block_sparse: also the blocks stride, 2 stride, ... before the diagonal one; 0 = none",
                 {.check = at_least(0)}),
      make_field("attention.sparse_ratio", &M::sparse_ratio,
                 "block_sparse: select more blocks per head until their estimated share of the attention mass "
                 "reaches this; 0 = the fixed pattern only",
                 {.check = in_range(0, 1, true, true)}),
      make_field("attention.threshold", &M::threshold,
                 "block_sparse selection: skip blocks whose estimated weight is below threshold x the heaviest "
                 "block's",
                 {.check = in_range(0, 1, true, false)}),
      make_field("attention.max_blocks", &M::max_blocks,
                 "block_sparse selection: at most this many selected blocks per query block (keeps the cost "
                 "linear in the sequence); 0 = no cap",
                 {.check = at_least(0)}),
  };
  return table;
}

std::int64_t ModelConfig::padded_vocab_size() const { return (vocab_size + 63) / 64 * 64; }

int ModelConfig::head_dim() const {
  MYRIAD_CHECK(n_head > 0, "model.n_head must be >= 1, got " << n_head);
  return n_embd / n_head;
}

int ModelConfig::kv_heads() const { return n_kv_head == 0 ? n_head : n_kv_head; }

int ModelConfig::ffn_hidden_size() const {
  if (ffn_hidden != 0) return ffn_hidden;
  if (family() == Architecture::llama) {
    std::int64_t two_thirds_of_4c = 8 * static_cast<std::int64_t>(n_embd) / 3;
    return static_cast<int>((two_thirds_of_4c + 63) / 64 * 64);
  }
  return 4 * n_embd;
}

bool ModelConfig::ties_embeddings() const { return tie_embeddings.value_or(family() == Architecture::gpt2); }

bool ModelConfig::uses_bias() const { return bias.value_or(family() == Architecture::gpt2); }

Architecture ModelConfig::family() const {
  if (architecture != Architecture::moe) return architecture;
  return moe_base == BlockFamily::llama ? Architecture::llama : Architecture::gpt2;
}

int ModelConfig::moe_top_k() const { return !is_moe() ? 0 : top_k == 0 ? 2 : top_k; }

int ModelConfig::expert_ffn() const { return expert_ffn_hidden > 0 ? expert_ffn_hidden : ffn_hidden_size(); }

void ModelConfig::validate() const {
  validate_fields(*this);
  MYRIAD_CHECK(n_embd % n_head == 0,
               "model.n_embd (" << n_embd << ") must be divisible by model.n_head (" << n_head << ")");
  MYRIAD_CHECK(kv_heads() <= n_head && n_head % kv_heads() == 0, "model.n_kv_head ("
                                                                     << n_kv_head << ") must divide model.n_head ("
                                                                     << n_head << "); 0 means n_kv_head = n_head");
  MYRIAD_CHECK(family() != Architecture::llama || head_dim() % 2 == 0,
               "model: llama blocks apply RoPE to pairs of channels, so n_embd / n_head ("
                   << n_embd << " / " << n_head << " = " << head_dim() << ") must be even");
  MYRIAD_CHECK(family() == Architecture::llama || rope_theta == ModelConfig{}.rope_theta,
               "model.rope_theta applies to RoPE, which llama blocks use; gpt2 blocks have learned positions: drop "
               "the key or set model.architecture llama");
  validate_attention();
  if (is_moe()) {
    validate_moe();
    return;
  }
  // A dense model: every MoE key at its default, or refused naming it.
  const ModelConfig defaults;
  const std::vector<std::pair<const char*, bool>> moe_keys = {
      {"moe_base", moe_base != defaults.moe_base},
      {"num_experts", num_experts != 0},
      {"top_k", top_k != 0},
      {"expert_capacity", expert_capacity != 0},
      {"capacity_factor", capacity_factor.has_value()},
      {"dropless", dropless},
      {"router_scores", router_scores != defaults.router_scores},
      {"normalize_top_k", normalize_top_k != defaults.normalize_top_k},
      {"aux_loss_coef", aux_loss_coef != defaults.aux_loss_coef},
      {"z_loss_coef", z_loss_coef != defaults.z_loss_coef},
      {"shared_experts", shared_experts != 0},
      {"moe_every", moe_every != 1},
      {"expert_ffn_hidden", expert_ffn_hidden != 0},
  };
  for (const auto& [key, set] : moe_keys) {
    if (!set) continue;
    const FieldValue value = find_field(fields(), key)->get(*this);
    MYRIAD_THROW("model." << key << " (" << format_field_value(value) << ") requires model.architecture: moe; on a "
                          << choice_name(architecture)
                          << " model the key would do nothing: remove it, or set model.architecture: moe");
  }
}

void ModelConfig::validate_moe() const {
  MYRIAD_CHECK(num_experts >= 1,
               "model.architecture moe needs model.num_experts >= 1 (experts per MoE layer), got " << num_experts);
  MYRIAD_CHECK(moe_top_k() <= 8 && moe_top_k() <= num_experts,
               "model.top_k (" << moe_top_k() << ") must lie in [1, min(8, model.num_experts " << num_experts << ")]");
  MYRIAD_CHECK(moe_every <= n_layer, "model.moe_every (" << moe_every << ") must be <= model.n_layer (" << n_layer
                                                         << "): no block would have experts");
  MYRIAD_CHECK(!(dropless && (expert_capacity > 0 || capacity_factor.has_value())),
               "model.dropless: true computes every routed token, so model.expert_capacity ("
                   << expert_capacity
                   << ") and model.capacity_factor would do nothing: remove them or set dropless: false");
  MYRIAD_CHECK(!(expert_capacity > 0 && capacity_factor.has_value()),
               "model.expert_capacity (" << expert_capacity << ") and model.capacity_factor (" << *capacity_factor
                                         << ") both size the capacity: keep one");
}

// Keys that act only with block_sparse (or with the selection on): refused, naming them, where
// they would do nothing.
void ModelConfig::validate_attention() const {
  const ModelConfig defaults;
  auto refuse_set = [&](std::initializer_list<std::pair<const char*, bool>> keys, const std::string& why) {
    for (const auto& [key, set] : keys) {
      if (!set) continue;
      const FieldValue value = find_field(fields(), key)->get(*this);
      MYRIAD_THROW("model." << key << " (" << format_field_value(value) << ") " << why);
    }
  };
  if (attention_kind == AttentionLayout::dense) {
    refuse_set({{"attention.block_size", attention_block_size != defaults.attention_block_size},
                {"attention.local_blocks", local_blocks != defaults.local_blocks},
                {"attention.global_blocks", global_blocks != defaults.global_blocks},
                {"attention.stride_blocks", stride_blocks != defaults.stride_blocks},
                {"attention.sparse_ratio", sparse_ratio != defaults.sparse_ratio},
                {"attention.threshold", threshold != defaults.threshold},
                {"attention.max_blocks", max_blocks != defaults.max_blocks}},
               "acts only with model.attention.kind: block_sparse; attention is dense here: remove the key, or set "
               "attention.kind: block_sparse");
    return;
  }
  if (sparse_ratio == 0.0) {
    refuse_set({{"attention.threshold", threshold != defaults.threshold},
                {"attention.max_blocks", max_blocks != defaults.max_blocks}},
               "tunes the per-head block selection, which runs only with model.attention.sparse_ratio > 0 "
               "(0: the fixed pattern only): remove the key, or set sparse_ratio");
  }
}

const std::vector<RefusedKey>& ModelConfig::refused_keys() {
  static const std::vector<RefusedKey> refused = {
      {"block_size",
       "is not the context length here: in the 1.6T MoE recipe block_size is the tile of block-sparse attention, "
       "which is model.attention.block_size (attention: {kind: block_sparse, block_size: 64}); the longest "
       "sequence is model.context_length"},
      {"sparse_ratio",
       "belongs to block-sparse attention: write it as model.attention.sparse_ratio "
       "(attention: {kind: block_sparse, sparse_ratio: 0.7})"},
      {"threshold",
       "belongs to block-sparse attention: write it as model.attention.threshold "
       "(attention: {kind: block_sparse, sparse_ratio: 0.7, threshold: 0.1})"},
      {"attention_config",
       "is the 1.6T MoE recipe's spelling of block-sparse attention; here it is model.attention with the kind "
       "named: attention: {kind: block_sparse, sparse_ratio: 0.7, block_size: 64, threshold: 0.1}"},
  };
  return refused;
}

}  // namespace myriad
