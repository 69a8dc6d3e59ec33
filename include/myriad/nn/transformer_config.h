// TransformerConfig — the shape of a decoder-only transformer, GPT-2 or LLaMA style.
//
// GPT-2: learned positions, LayerNorm, GELU MLP (F = 4C), biases, tied input/output embeddings.
// LLaMA: RoPE, RMSNorm, SwiGLU MLP, grouped-query attention, no biases, untied head.
// The vocabulary is padded up to a multiple of 64 (padded_vocab_size): the embedding table has
// padded rows so GEMMs and later tensor-parallel splits see aligned sizes; padded rows are never
// looked up and never produce logits, so they stay at their initial values with zero gradient.
#pragma once

#include <cstdint>
#include <string>

#include "myriad/core/step_modes.h"
#include "myriad/ops/block_layout.h"

namespace myriad::nn {

enum class NormKind { layernorm, rmsnorm };
enum class MlpKind { gelu, swiglu };
enum class PositionKind { learned, rope };
// Activation recompute per block: myriad::Recompute (core/step_modes.h), shared with the config.

enum class RouterScore { softmax, sigmoid };

struct MoeSpec {
  int num_experts = 0;          // 0: every block is dense
  int top_k = 2;                // experts per token (1..8)
  int every = 1;                // blocks whose (layer + 1) % every == 0 are MoE blocks
  int shared_experts = 0;       // always-on experts (one dense MLP of shared_experts * expert_ffn)
  std::int64_t expert_ffn = 0;  // hidden width of one expert; 0 = ffn_hidden
  RouterScore score = RouterScore::softmax;
  bool normalize_top_k = true;  // combine weights = chosen scores / their sum
  float aux_loss_coef = 0.01f;  // load-balancing loss (per sequence; ops/moe_routing.h)
  float z_loss_coef = 0.001f;   // router z-loss
  // Capacity per expert per sequence: expert_capacity tokens, else ceil(capacity_factor * T * top_k
  // / num_experts), else (both 0) dropless.
  std::int64_t expert_capacity = 0;
  double capacity_factor = 0.0;

  bool enabled() const { return num_experts > 0; }
  bool is_moe_layer(std::int64_t layer) const { return enabled() && (layer + 1) % every == 0; }
  // Tokens one expert may take from one sequence of length T; -1 = unlimited (dropless).
  std::int64_t capacity(std::int64_t T) const;
};

enum class AttentionKind { dense, block_sparse };

// Block-sparse attention (nn/block_selection.h): every query block reads the blocks of a fixed
// causal pattern (its diagonal block, the local window, global sinks, strided blocks) and, with
// sparse_ratio > 0, blocks selected per head from block summaries until their estimated share of
// the attention mass reaches sparse_ratio (at most max_blocks of them; 0 = no cap), dropping those
// whose estimated weight is below threshold times the heaviest block's.
struct AttentionSpec {
  AttentionKind kind = AttentionKind::dense;
  std::int64_t block_size = 64;
  FixedBlockPattern fixed{.local_blocks = 1, .global_blocks = 1};
  double sparse_ratio = 0.0;
  double threshold = 0.0;
  std::int64_t max_blocks = 8;

  bool block_sparse() const { return kind == AttentionKind::block_sparse; }
  bool selects() const { return block_sparse() && sparse_ratio > 0.0; }
  // Key positions one query at position t reads on average over a sequence of T (for FLOP counts):
  // T / 2 when dense (the causal half); the fixed pattern's plus max_blocks selected blocks (an
  // upper bound) when block-sparse.
  double mean_keys_per_query(std::int64_t T) const;
};

struct TransformerConfig {
  std::int64_t vocab_size = 50257;
  std::int64_t n_layer = 12;
  std::int64_t n_head = 12;
  std::int64_t n_kv_head = 12;         // == n_head: multi-head; fewer: grouped-query attention
  std::int64_t n_embd = 768;           // C
  std::int64_t context_length = 1024;  // longest sequence (learned position table size)
  std::int64_t ffn_hidden = 3072;      // F
  NormKind norm = NormKind::layernorm;
  MlpKind mlp = MlpKind::gelu;
  PositionKind positions = PositionKind::learned;
  bool tie_embeddings = true;
  bool bias = true;
  float norm_eps = 1e-5f;
  double rope_theta = 10000.0;
  float init_std = 0.02f;
  MoeSpec moe;
  AttentionSpec attention;

  static TransformerConfig gpt2(std::int64_t vocab, std::int64_t layers, std::int64_t heads, std::int64_t embd,
                                std::int64_t block);
  static TransformerConfig llama(std::int64_t vocab, std::int64_t layers, std::int64_t heads, std::int64_t kv_heads,
                                 std::int64_t embd, std::int64_t block);

  std::int64_t padded_vocab_size() const { return (vocab_size + 63) / 64 * 64; }
  std::int64_t head_dim() const { return n_embd / n_head; }
  std::int64_t qkv_width() const { return (n_head + 2 * n_kv_head) * head_dim(); }
  std::int64_t expert_ffn() const { return moe.expert_ffn > 0 ? moe.expert_ffn : ffn_hidden; }
  void validate() const;  // throws naming the offending numbers
};

}  // namespace myriad::nn
