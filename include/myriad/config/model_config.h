// ModelConfig — the `model:` section: the transformer's architecture and sizes.
//
// Two families: gpt2 (LayerNorm, GELU MLP, learned positions, biases, tied embeddings) and llama
// (RMSNorm, SwiGLU MLP, RoPE, no biases, untied embeddings, optional grouped-query attention);
// moe (the 1.6T MoE recipe's "MoE") is a mixture-of-experts model whose blocks follow moe_base
// (llama by default) with the MLP of every moe_every-th block replaced by experts (nn/moe_layer.h).
// Keys that default to "derived" hold 0 / auto; the helper methods return the value in use and are
// what the model code reads. The mixture-of-experts keys act only for architecture moe: a value
// other than the default on a dense model is refused naming the key. The `attention:` map (keys
// attention.*) chooses dense or block-sparse attention; the 1.6T MoE recipe's sparse-attention keys
// given flat under model (block_size, sparse_ratio, threshold) are refused, pointing there.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "myriad/config/choices.h"
#include "myriad/config/field.h"

namespace myriad {

struct ModelConfig {
  static constexpr std::string_view kSection = "model";
  static constexpr std::string_view kSectionMeaning = "the transformer's architecture and sizes";

  Architecture architecture = Architecture::gpt2;  // model family: gpt2 | llama
  std::int64_t vocab_size = 50257;                 // tokenizer vocabulary (V before padding)
  int n_layer = 12;                                // transformer blocks (L)
  int n_head = 12;                                 // attention (query) heads (H)
  int n_kv_head = 0;                               // key/value heads for GQA; 0 = n_head
  int n_embd = 768;                                // channels (C)
  int context_length = 1024;                       // longest sequence (positions)
  int ffn_hidden = 0;                              // MLP hidden width; 0 = derived (ffn_hidden_size())
  double norm_eps = 1e-5;                          // epsilon of LayerNorm / RMSNorm
  double rope_theta = 10000.0;                     // RoPE base (llama only)
  std::optional<bool> tie_embeddings;              // share wte with the LM head; unset = true for gpt2, false for llama
  std::optional<bool> bias;  // biases in the linear layers (not SwiGLU's up); unset = true for gpt2, false for llama
  double init_std = 0.02;    // std of the normal weight initialisation
  // Mixture of experts (architecture moe only).
  BlockFamily moe_base = BlockFamily::llama;  // norms, positions and MLP kind of the blocks
  int num_experts = 0;                        // experts per MoE layer (>= 1 for moe)
  int top_k = 0;                              // experts per token; 0 = 2 for moe
  std::int64_t expert_capacity = 0;           // tokens one expert takes per sequence; 0 = from capacity_factor
  std::optional<double> capacity_factor;      // capacity = ceil(factor * seq_len * top_k / num_experts); auto = 1.25
  bool dropless = false;                      // no capacity: every routed token is computed
  RouterScoring router_scores = RouterScoring::softmax;  // softmax over experts, or sigmoid per expert
  bool normalize_top_k = true;                           // combine weights = chosen scores / their sum
  double aux_loss_coef = 0.01;                           // load-balancing loss coefficient
  double z_loss_coef = 0.001;                            // router z-loss coefficient
  int shared_experts = 0;                                // always-on experts per MoE layer
  int moe_every = 1;                                     // MoE in blocks whose (layer + 1) % moe_every == 0
  int expert_ffn_hidden = 0;                             // hidden width of one expert; 0 = ffn_hidden in use
  // Attention (`attention:` map; nn/block_selection.h). The block_sparse keys act only with
  // kind block_sparse, and the selection keys only with sparse_ratio > 0: refused otherwise.
  AttentionLayout attention_kind = AttentionLayout::dense;
  std::int64_t attention_block_size = 64;  // positions per block
  std::int64_t local_blocks = 1;           // blocks before the diagonal one (sliding window)
  std::int64_t global_blocks = 1;          // the sequence's first blocks (attention sinks)
  std::int64_t stride_blocks = 0;          // every stride-th block back; 0 = none
  double sparse_ratio = 0.0;               // selection until this estimated share; 0 = fixed only
  double threshold = 0.0;                  // drop blocks below threshold x the heaviest's estimate
  std::int64_t max_blocks = 8;             // at most this many selected blocks; 0 = no cap

  // Vocabulary rounded up to a multiple of 64 (embedding and LM-head rows).
  std::int64_t padded_vocab_size() const;
  // Channels per head (D = n_embd / n_head).
  int head_dim() const;
  // Key/value heads in use: n_kv_head, or n_head when 0.
  int kv_heads() const;
  // MLP hidden width in use: ffn_hidden, or 4*n_embd (gpt2), or round_up(8*n_embd/3, 64) (llama).
  int ffn_hidden_size() const;
  // Whether the LM head reuses the token embedding (tie_embeddings, or the family's default).
  bool ties_embeddings() const;
  // Whether the linear layers carry biases (bias, or the family's default); LayerNorms always do,
  // RMSNorms never, SwiGLU's up matrix never.
  bool uses_bias() const;
  // The dense family the blocks follow: architecture, or moe_base for moe.
  Architecture family() const;
  bool is_moe() const { return architecture == Architecture::moe; }
  // MoE values in use: top_k (0 = 2; 0 on a dense model), expert hidden width, capacity factor
  // (auto = 1.25; it sizes the capacity only without expert_capacity and dropless).
  int moe_top_k() const;
  int expert_ffn() const;
  double moe_capacity_factor() const { return capacity_factor.value_or(1.25); }

  // Per-key checks plus: n_embd % n_head, n_head % kv_heads, even head_dim for RoPE; for moe:
  // num_experts >= 1, top_k in [1, min(8, num_experts)], moe_every in [1, n_layer], one way to
  // size the capacity; for gpt2 / llama: every MoE key at its default. Throws naming the keys.
  void validate() const;

  static const std::vector<RefusedKey>& refused_keys();
  void validate_moe() const;
  void validate_attention() const;

  static const std::vector<Field<ModelConfig>>& fields();
  bool operator==(const ModelConfig&) const = default;
};

}  // namespace myriad
