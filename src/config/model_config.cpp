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
      make_field("n_kv_head", &M::n_kv_head, "key/value heads (grouped-query attention); 0 = n_head; must divide n_head",
                 {.check = at_least(0)}),
      make_field("n_embd", &M::n_embd, "channels C (embedding width)", {.check = at_least(1)}),
      make_field("context_length", &M::context_length, "maximum sequence length (positions)", {.check = at_least(1)}),
      make_field("ffn_hidden", &M::ffn_hidden,
                 "MLP hidden width; 0 = derived: 4*n_embd (gpt2), round_up(8*n_embd/3, 64) (llama)",
                 {.check = at_least(0)}),
      make_field("norm_eps", &M::norm_eps, "epsilon of LayerNorm / RMSNorm", {.check = greater_than(0)}),
      make_field("rope_theta", &M::rope_theta, "RoPE base frequency (llama)", {.check = greater_than(0)}),
      make_field("tie_embeddings", &M::tie_embeddings,
                 "LM head shares the token embedding; auto = true for gpt2, false for llama"),
      make_field("bias", &M::bias, "biases in linear layers and norms; auto = true for gpt2, false for llama"),
      make_field("init_std", &M::init_std, "std of the normal initialisation of weights", {.check = greater_than(0)}),
      make_field("num_experts", &M::num_experts,
                 "MoE experts per layer; reserved for architecture moe (not implemented yet): must be 0",
                 {.check = at_least(0)}),
      make_field("top_k", &M::top_k, "experts per token; reserved for architecture moe (not implemented yet): must be 0",
                 {.check = at_least(0)}),
      make_field("expert_capacity", &M::expert_capacity,
                 "tokens per expert; reserved for architecture moe (not implemented yet): must be 0",
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
  if (architecture == Architecture::llama) {
    std::int64_t two_thirds_of_4c = 8 * static_cast<std::int64_t>(n_embd) / 3;
    return static_cast<int>((two_thirds_of_4c + 63) / 64 * 64);
  }
  return 4 * n_embd;
}

bool ModelConfig::ties_embeddings() const {
  return tie_embeddings.value_or(architecture == Architecture::gpt2);
}

bool ModelConfig::uses_bias() const { return bias.value_or(architecture == Architecture::gpt2); }

void ModelConfig::validate() const {
  validate_fields(*this);
  MYRIAD_CHECK(n_embd % n_head == 0,
               "model.n_embd (" << n_embd << ") must be divisible by model.n_head (" << n_head << ")");
  MYRIAD_CHECK(kv_heads() <= n_head && n_head % kv_heads() == 0,
               "model.n_kv_head (" << n_kv_head << ") must divide model.n_head (" << n_head
                                   << "); 0 means n_kv_head = n_head");
  MYRIAD_CHECK(architecture != Architecture::llama || head_dim() % 2 == 0,
               "model: llama applies RoPE to pairs of channels, so n_embd / n_head (" << n_embd << " / " << n_head
                                                                                       << " = " << head_dim()
                                                                                       << ") must be even");
  const auto refuse_moe_key = [&](const char* key, std::int64_t value) {
    MYRIAD_CHECK(value == 0, "model." << key << " (" << value
                                      << ") requires model.architecture: moe, and mixture of experts is not "
                                         "implemented yet: on a "
                                      << choice_name(architecture)
                                      << " model the key would do nothing; remove it (or set it to 0)");
  };
  refuse_moe_key("num_experts", num_experts);
  refuse_moe_key("top_k", top_k);
  refuse_moe_key("expert_capacity", expert_capacity);
}

const std::vector<RefusedKey>& ModelConfig::refused_keys() {
  static const std::vector<RefusedKey> refused = {
      {"block_size",
       "is not the context length here: in the seed documents block_size is the tile of block-sparse attention, "
       "which is not implemented yet; the longest sequence is model.context_length"},
      {"sparse_ratio", "block-sparse attention is not implemented yet (attention is dense); remove the key"},
      {"threshold", "block-sparse attention is not implemented yet (attention is dense); remove the key"},
      {"attention", "block-sparse attention is not implemented yet (attention is dense); remove the key"},
      {"capacity_factor",
       "requires model.architecture: moe, and mixture of experts is not implemented yet; remove the key"},
  };
  return refused;
}

}  // namespace myriad
