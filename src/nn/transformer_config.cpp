// TransformerConfig presets and validation.
#include "myriad/nn/transformer_config.h"

#include <algorithm>
#include <cmath>

#include "myriad/core/error.h"

namespace myriad::nn {

std::int64_t MoeSpec::capacity(std::int64_t T) const {
  if (expert_capacity > 0) return expert_capacity;
  if (capacity_factor <= 0.0) return -1;
  const double tokens = capacity_factor * static_cast<double>(T * top_k) / static_cast<double>(num_experts);
  return std::max<std::int64_t>(1, static_cast<std::int64_t>(std::ceil(tokens)));
}

double AttentionSpec::mean_keys_per_query(std::int64_t T) const {
  if (T <= 0) return 0.0;
  if (!block_sparse()) return static_cast<double>(T) / 2.0;  // the causal half (the model FLOPs convention)
  const BlockLayout layout = fixed_block_layout(fixed, T, block_size);
  double keys = 0.0;  // over every query position: the listed blocks' keys at or before it
  for (std::int64_t qb = 0; qb < layout.query_blocks; ++qb) {
    const std::int64_t q_begin = qb * block_size, q_end = std::min(T, q_begin + block_size);
    const std::int64_t rows = q_end - q_begin;
    std::int64_t listed = static_cast<std::int64_t>(layout.row(0, qb).size());
    if (selects()) listed += max_blocks > 0 ? std::min(max_blocks, qb) : qb;
    listed = std::min(listed, qb + 1);
    // Full blocks before the diagonal one, plus the causal half of the diagonal block.
    keys += static_cast<double>(rows * (listed - 1) * block_size) + static_cast<double>(rows * (rows + 1)) / 2.0;
  }
  return keys / static_cast<double>(T);
}

TransformerConfig TransformerConfig::gpt2(std::int64_t vocab, std::int64_t layers, std::int64_t heads,
                                          std::int64_t embd, std::int64_t block) {
  TransformerConfig c;
  c.vocab_size = vocab;
  c.n_layer = layers;
  c.n_head = heads;
  c.n_kv_head = heads;
  c.n_embd = embd;
  c.context_length = block;
  c.ffn_hidden = 4 * embd;
  return c;
}

TransformerConfig TransformerConfig::llama(std::int64_t vocab, std::int64_t layers, std::int64_t heads,
                                           std::int64_t kv_heads, std::int64_t embd, std::int64_t block) {
  TransformerConfig c = gpt2(vocab, layers, heads, embd, block);
  c.n_kv_head = kv_heads;
  c.ffn_hidden = (8 * embd / 3 + 63) / 64 * 64;
  c.norm = NormKind::rmsnorm;
  c.mlp = MlpKind::swiglu;
  c.positions = PositionKind::rope;
  c.tie_embeddings = false;
  c.bias = false;
  return c;
}

void TransformerConfig::validate() const {
  MYRIAD_CHECK(vocab_size > 0 && n_layer > 0 && n_head > 0 && n_kv_head > 0 && n_embd > 0 && context_length > 0 &&
                   ffn_hidden > 0,
               "model: sizes must be positive (vocab_size "
                   << vocab_size << ", n_layer " << n_layer << ", n_head " << n_head << ", n_kv_head " << n_kv_head
                   << ", n_embd " << n_embd << ", context_length " << context_length << ", ffn_hidden " << ffn_hidden
                   << ")");
  MYRIAD_CHECK(n_embd % n_head == 0, "model: n_embd " << n_embd << " is not divisible by n_head " << n_head);
  MYRIAD_CHECK(n_head % n_kv_head == 0, "model: n_head " << n_head << " is not a multiple of n_kv_head " << n_kv_head);
  MYRIAD_CHECK(positions != PositionKind::rope || head_dim() % 2 == 0,
               "model: RoPE needs an even head dim, got n_embd / n_head = " << head_dim());
  if (attention.block_sparse()) {
    MYRIAD_CHECK(attention.block_size >= 1,
                 "model: attention.block_size must be at least 1, got " << attention.block_size);
    MYRIAD_CHECK(attention.sparse_ratio >= 0.0 && attention.sparse_ratio <= 1.0,
                 "model: attention.sparse_ratio " << attention.sparse_ratio << " must lie in [0, 1]");
    MYRIAD_CHECK(attention.threshold >= 0.0 && attention.threshold < 1.0,
                 "model: attention.threshold " << attention.threshold << " must lie in [0, 1)");
    MYRIAD_CHECK(attention.max_blocks >= 0, "model: attention.max_blocks must be >= 0, got " << attention.max_blocks);
    MYRIAD_CHECK(
        attention.fixed.local_blocks >= 0 && attention.fixed.global_blocks >= 0 && attention.fixed.stride_blocks >= 0,
        "model: attention.local_blocks, global_blocks and stride_blocks must be >= 0");
  }
  if (moe.enabled()) {
    MYRIAD_CHECK(moe.top_k >= 1 && moe.top_k <= 8 && moe.top_k <= moe.num_experts,
                 "model: MoE top_k " << moe.top_k << " must lie in [1, min(8, num_experts " << moe.num_experts << ")]");
    MYRIAD_CHECK(moe.every >= 1 && moe.every <= n_layer,
                 "model: MoE every " << moe.every << " must lie in [1, n_layer " << n_layer << "]");
    MYRIAD_CHECK(moe.shared_experts >= 0 && moe.expert_capacity >= 0 && moe.capacity_factor >= 0.0 &&
                     moe.aux_loss_coef >= 0.0f && moe.z_loss_coef >= 0.0f,
                 "model: MoE shared_experts, expert_capacity, capacity_factor and loss coefficients must be >= 0");
  }
}

}  // namespace myriad::nn
