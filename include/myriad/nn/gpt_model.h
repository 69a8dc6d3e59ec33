// GptModel — token (+ learned position) embedding, L transformer blocks, final norm, LM head and
// fused cross-entropy, with explicit forward and backward.
//
// Inputs: ids, targets (B, T) i32, targets may hold the ignore index (-100). The LM head only
// produces the real vocabulary's logits (N, V): padded embedding rows never get probability.
// Loss normalisation is the caller's: forward_backward() seeds every valid token's loss
// gradient with `loss_scale` (pass 1 / valid tokens of the whole global batch) and returns the
// un-normalised loss sum, so gradient accumulation over uneven micro-batches is exact.
// Buffers for a (B, T, recompute) combination are allocated once and reused.
// Gradient contract: parameter gradients accumulate (`+=`) across calls until zero_grads().
#pragma once

#include <memory>
#include <vector>

#include "myriad/nn/parameter_store.h"
#include "myriad/nn/transformer_block.h"
#include "myriad/nn/transformer_config.h"
#include "myriad/nn/unit_hooks.h"

namespace myriad::nn {

struct ActivationMemory {
  std::int64_t saved_bytes = 0;    // kept from forward to backward (per micro-batch)
  std::int64_t scratch_bytes = 0;  // shared buffers (recompute, gradients, logits)
};

struct LossSum {
  double sum = 0.0;         // sum of per-token losses over valid targets
  std::int64_t tokens = 0;  // number of valid targets
};

class GptModel {
 public:
  static constexpr std::int32_t kIgnoreIndex = -100;

  explicit GptModel(const TransformerConfig& config);

  const TransformerConfig& config() const { return config_; }
  ParameterStore& parameters() { return store_; }
  const ParameterStore& parameters() const { return store_; }
  void initialize(std::uint64_t seed) { store_.initialize(seed); }

  // Units of the flat layout (unit_hooks.h): 0 embeddings, 1..L blocks, L+1 final norm + head.
  const std::vector<ParamUnit>& units() const { return units_; }
  // Hooks called around every unit in forward/backward passes (nullptr = none); not owned.
  void set_hooks(UnitHooks* hooks) { hooks_ = hooks; }

  // Forward and backward of one micro-batch; accumulates parameter gradients.
  LossSum forward_backward(const Tensor& ids, const Tensor& targets, float loss_scale, Recompute mode);
  // Forward only (evaluation).
  LossSum forward_loss(const Tensor& ids, const Tensor& targets);
  // Logits (B, T, V) of a forward pass (no loss); for tests and simple generation.
  Tensor forward_logits(const Tensor& ids);

  // Logits (V) of the next token after `token` at `position`, using and extending the cache.
  Tensor decode(std::int32_t token, std::int64_t position, KvCache& cache) const;
  KvCache make_kv_cache() const;

  // Model FLOPs per trained token at sequence length T (forward + backward): 6 per matmul weight
  // (forward 2, backward 4), the tied LM head counted as V*C more, plus causal attention scores
  // and values, 6 * L * T * C (half of 12 * L * T * C).
  double flops_per_token(std::int64_t T) const;

  ActivationMemory activation_memory(std::int64_t B, std::int64_t T, Recompute mode) const;

 private:
  struct Buffers {
    std::int64_t B = 0, T = 0;
    Recompute mode = Recompute::none;
    std::vector<Tensor> residual;  // L + 1 tensors (B, T, C): input of each block and the last output
    std::vector<BlockActivations> blocks;
    BlockScratch scratch;
    Tensor positions;              // (B, T) i32
    Tensor pos_emb;                // (B, T, C)
    Tensor hf, hf_mean, hf_rstd;   // final norm output and stats
    Tensor logits;                 // (B*T, V); holds dlogits after backward
    Tensor losses, lse, grad_losses;  // (B*T)
    Tensor d_hf;                   // (B, T, C)
    Tensor grad;                   // (B, T, C) residual-stream gradient
  };

  void ensure_buffers(std::int64_t B, std::int64_t T, Recompute mode);
  void check_inputs(const Tensor& ids, const Tensor& targets) const;
  void forward(const Tensor& ids);
  LossSum loss(const Tensor& targets);
  Tensor head_weight(bool grad) const;
  void acquire(int unit, Pass pass) { if (hooks_) hooks_->acquire(unit, pass); }
  void release(int unit, Pass pass) { if (hooks_) hooks_->release(unit, pass); }
  void grads_ready(int unit) { if (hooks_) hooks_->grads_ready(unit); }
  void build_units();

  TransformerConfig config_;
  ParameterStore store_;
  std::vector<TransformerBlock> blocks_;
  std::size_t wte_ = 0, wpe_ = static_cast<std::size_t>(-1), norm_w_ = 0, norm_b_ = static_cast<std::size_t>(-1);
  std::size_t head_ = static_cast<std::size_t>(-1);
  Buffers buffers_;
  std::vector<ParamUnit> units_;
  UnitHooks* hooks_ = nullptr;
};

}  // namespace myriad::nn
