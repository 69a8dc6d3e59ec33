// GptModel — token (+ learned position) embedding, L transformer blocks, final norm, LM head and
// fused cross-entropy, with explicit forward and backward; one rank's part of it under a
// ModelSplit (tensor/sequence parallel share, pipeline chunks: model_split.h).
//
// Inputs: ids, targets (B, T) i32, targets may hold the ignore index (-100). The LM head only
// produces the real vocabulary's logits (N, V): padded embedding rows never get probability
// (under tp each rank holds V_padded/tp vocabulary rows and the cross-entropy is vocab-parallel,
// never gathering the logits). Loss normalisation is the caller's: the backward seeds every valid
// token's loss gradient with `loss_scale` (pass 1 / valid tokens of the whole global batch) and the
// forward returns the un-normalised loss sum, so accumulation over uneven micro-batches is exact.
//
// Pipeline interface: the rank's layers form num_chunks() chunks (virtual stages). For micro-batch
// buffers `slot` (0..slots-1, each a full set of activations): forward_chunk(c) reads ids (first
// global stage) or chunk_input(c), writes chunk_output(c) and, on the last global stage, returns
// the loss; backward_chunk(c) reads chunk_grad(c) = dL/d output (or starts from the loss) and
// leaves dL/d input there. forward_backward() = chunk 0 forward and backward in slot 0 of a model
// that holds every layer. Buffers for a (B, T, recompute, slots) combination are allocated once.
// Gradient contract: parameter gradients accumulate (`+=`) across calls until zero_grads().
#pragma once

#include <array>

#include <memory>
#include <vector>

#include "myriad/nn/loss_ledger.h"
#include "myriad/nn/model_split.h"
#include "myriad/nn/parameter_store.h"
#include "myriad/nn/pipeline_stage.h"
#include "myriad/nn/transformer_block.h"
#include "myriad/ops/placement.h"
#include "myriad/nn/transformer_config.h"
#include "myriad/nn/unit_hooks.h"
#include "myriad/ops/cross_entropy.h"

namespace myriad::nn {

struct ActivationMemory {
  std::int64_t saved_bytes = 0;    // kept from forward to backward (per micro-batch)
  std::int64_t scratch_bytes = 0;  // shared buffers (recompute, gradients, logits)
};

class GptModel final : public PipelineStage {
 public:
  static constexpr std::int32_t kIgnoreIndex = -100;

  // `allocate` false registers the parameters only (a layout: names, shapes, offsets).
  // `placement`: where parameters and buffers live — the host, or a device backend's memory (the
  // same model code runs on either; a device placement needs the whole model on one rank, tp 1).
  explicit GptModel(const TransformerConfig& config, const ModelSplit& split = {}, bool allocate = true,
                    ops::Placement placement = {});

  const TransformerConfig& config() const { return config_; }
  const ModelSplit& split() const { return split_; }
  const ops::Placement& placement() const { return placement_; }
  ParameterStore& parameters() { return store_; }
  const ParameterStore& parameters() const { return store_; }
  void initialize(std::uint64_t seed) { store_.initialize(seed); }
  // Weight-only INT8 inference (gpt_model_int8.cpp): parameter `name` — a linear layer's 2-D
  // weight, an MoE expert weight (E, out, in) or the token embedding — computes from `q` (its
  // shape, int8) and `scales` (ops/int8_linear.h; per expert for 3-D) in every forward. Host
  // tensors; placed where the model lives. Whole models only (tp 1): the layers read whole
  // weights. release_f32_copies() then frees the f32 values of the attached parameters and every
  // gradient: inference only afterwards.
  void attach_int8(const std::string& name, const Tensor& q, const Tensor& scales, std::int64_t group_size);
  void release_f32_copies();
  bool has_int8() const;

  // Units of the flat layout (unit_hooks.h): embeddings (first stage), one per local block (an MoE
  // block has a second one after it: its experts, ParamUnit::expert), final norm + head (last
  // stage), in that order.
  const std::vector<ParamUnit>& units() const { return units_; }
  // Hooks called around every unit in forward/backward passes (nullptr = none); not owned.
  void set_hooks(UnitHooks* hooks) { hooks_ = hooks; }

  // Forward and backward of one micro-batch (a model holding every layer); accumulates gradients.
  LossSum forward_backward(const Tensor& ids, const Tensor& targets, float loss_scale, Recompute mode);
  // Forward only (evaluation; a model holding every layer).
  LossSum forward_loss(const Tensor& ids, const Tensor& targets);
  // Logits (B, T, V) of a forward pass (no loss); serial models only, for tests.
  Tensor forward_logits(const Tensor& ids);

  // Mixed precision: the residual stream between blocks is kept in `format` (bf16 / f16: each
  // block's output and the embedding's sum rounded once; the pipeline passes it on in 16 bits), its
  // gradients backward are rounded to it (f32 tensors: the values a low-precision run passes on;
  // f16 overflow becomes inf, which the loss scaler catches), and every linear layer's GEMM takes its
  // operands in `format` (nn/linear.h: 16-bit tensor-core GEMMs on a GPU); f32 = none. Weights
  // are the caller's. The blocks' GEMM inputs (norm outputs, MLP activation) are then kept in
  // `format` (block_activation_slots), so the model's buffers are made again at the next prepare.
  void set_activation_precision(DType format);
  DType activation_precision() const { return activation_precision_; }
  // training.precision fp8: the blocks' dense linear layers on FP8 GEMMs with delayed scaling
  // (nn/fp8_scaling.h; one scaling state for every layer of the model, this rank's or not, so that
  // all ranks' states reduce slot by slot). Null before enable_fp8.
  void enable_fp8(const Fp8Recipe& recipe);
  Fp8Scaling* fp8_scaling() const { return fp8_.get(); }

  // Pipeline pieces (see the file comment).
  int num_chunks() const override { return static_cast<int>(chunk_blocks_.size()); }
  bool chunk_is_first(int chunk) const { return chunk == 0 && split_.first_stage; }
  bool chunk_is_last(int chunk) const { return chunk == num_chunks() - 1 && split_.last_stage; }
  // Allocates buffers for `slots` micro-batches of (B, T) under `mode` (kept when unchanged).
  void prepare(std::int64_t B, std::int64_t T, Recompute mode, int slots) override;
  Recompute buffer_mode() const override { return buffers_.mode; }
  std::int64_t buffers_T() const { return buffers_.T; }  // the sequence length of the prepared buffers
  Tensor chunk_input(int chunk, int slot) override;
  Tensor chunk_output(int chunk, int slot) override;
  Tensor chunk_grad(int chunk, int slot) override;
  std::int64_t forward_chunk(int chunk, int slot, const Tensor& ids, const Tensor& targets) override;
  double take_loss_sum() override { return losses_.take(); }
  void clear_losses() override { losses_.clear(); }
  void backward_chunk(int chunk, int slot, const Tensor& ids, const Tensor& targets, float loss_scale) override;
  // Staged inputs (a CUDA graph of a micro-batch, train/micro_batch_graph.h): while on,
  // forward_chunk / backward_chunk take ids and targets already on the model's device (checked
  // against the vocabulary by whoever placed them there), the backward reads the loss gradient
  // write_loss_scale() put in place instead of writing it, and the head records no losses
  // (record_losses does, after the work ran; forward_chunk then returns 0 valid targets): no value
  // that changes between micro-batches is passed to a kernel as an argument.
  void set_inputs_staged(bool staged) { inputs_staged_ = staged; }
  void write_loss_scale(float loss_scale);  // the last stage's loss gradient (prepared buffers)
  void record_losses(int slot);             // the slot's per-token losses, into the ledger
  // Changes whenever prepare() replaces the buffers (new B, T or recompute mode): a recorded graph
  // that baked their addresses in is stale then.
  std::uint64_t buffers_generation() const { return buffers_generation_; }

  // A batched decoding step (gpt_model_decode.cpp): runs every sequence's new tokens through the
  // blocks against `cache` (extending it) and returns the logits (S, V) of each sequence's last
  // new token, on the host (sampling runs there). Every layer on this rank (no pipeline split),
  // dense attention (a block-sparse model's selection needs the whole prefix: nn::generate re-runs
  // it); under tp (without sequence parallelism) every rank of the group calls it with the same
  // sequences, its cache holding its own key/value heads, and every rank gets the whole logits.
  Tensor decode(const std::vector<DecodeSequence>& seqs, PagedKvCache& cache) const;
  // A cache of `num_blocks` blocks of `block_size` positions on the model's placement.
  PagedKvCache make_paged_kv_cache(std::int64_t block_size, std::int64_t num_blocks) const;

  // Model FLOPs per trained token at sequence length T (forward + backward) of the WHOLE model,
  // whatever this rank holds: 6 per matmul weight (forward 2, backward 4), the tied LM head counted
  // as V*C more, plus attention scores and values, 12 * L * C per visible key: 6 * L * T * C when
  // dense and causal (T / 2 keys per query), the kept blocks' keys when block-sparse.
  double flops_per_token(std::int64_t T) const;

  // MoE telemetry: per local MoE block, the routing of every training forward since the reset.
  const std::vector<MoeLayerStats>& moe_stats() const { return moe_stats_; }
  // Every local MoE block's totals (MoeLayerStats::totals, rows in moe_stats() order) read to the
  // host in one transfer: (blocks, E + 3) f64; undefined before the first recorded forward.
  Tensor moe_totals_on_host() const;
  void reset_moe_stats();
  // Block-sparse attention: what this rank's forwards kept since the last reset (every local block):
  // the host selections' counts plus a device selection's totals, read to the host in one transfer
  // (so call it with the step's metrics, not inside a step).
  BlockSelectionStats attention_stats() const;
  void reset_attention_stats();
  // What forwards count on the host — a fixed block-sparse layout's blocks (the host part of
  // attention_stats()), the MoE layers' routed assignments, sequences and tokens (MoeLayerStats) —
  // and an addition to it: a CUDA graph's replay, whose host code does not run, adds what its
  // recorded forward counted (train/micro_batch_graph.h).
  struct HostCounts {
    BlockSelectionStats attention;
    std::vector<std::array<std::int64_t, 3>> moe;  // per moe_stats() row: assignments, sequences, tokens
  };
  HostCounts host_counts() const;
  void add_host_counts(const HostCounts& counts);
  // Whether forwards add to the MoE and attention telemetry (on by default). A forward whose batch
  // runs again before the update (the research API's forward(), then backward()'s pass) turns it
  // off, so that each token is counted once.
  void set_recording_stats(bool on) { recording_stats_ = on; }

  // Parameters one token uses (the whole model's; experts: top_k of each MoE layer's), and all.
  std::int64_t active_parameters() const;

  // What this rank keeps per micro-batch in flight, and its shared buffers.
  ActivationMemory activation_memory(std::int64_t B, std::int64_t T, Recompute mode) const;

 private:
  struct Slot {
    std::vector<Tensor> residual;          // chunk c's blocks [b0, b1) read residual[b0 + c] .. write residual[b1 + c]
    std::vector<BlockActivations> blocks;  // per local block
    std::vector<Tensor> grad;              // per chunk, residual shape, in the stream's format: dL/d output
                                           // received, dL/d input sent (16-bit: the pipeline's messages)
    Tensor hf, hf_mean, hf_rstd;           // final norm output (residual rows) and stats
    Tensor logits;                         // (N, V) or (N, V_local); holds dlogits after backward
    Tensor losses, lse;                    // (N)
  };
  struct Buffers {
    std::int64_t B = 0, T = 0;
    Recompute mode = Recompute::none;
    std::vector<Slot> slots;
    // The activations no block keeps under `mode` (recomputed in the backward), one set for every
    // slot: a rank runs one action at a time and nothing in them outlives a block's pass.
    BlockActivations shared;
    BlockScratch scratch;
    Tensor positions;      // (B, T) i32: t
    Tensor row_positions;  // the positions of this rank's residual rows (sequence parallel)
    Tensor pos_emb;        // residual shape
    Tensor grad_losses;    // (N)
    Tensor d_hf;           // (B, T, C) head input gradient
    Tensor norm_grads;     // the final norm's gradients (2 C), summed over the group, then added
    Tensor hf_gathered;    // sequence parallel: every rank's hf rows (B, T, C), gathered when used
    Tensor grad_work;      // 16-bit stream: the f32 dL/d stream while a chunk's backward runs
  };

  Slot make_slot() const;
  DType kept_gemm_input_format() const;  // block_activation_slots' gemm_inputs
  DType head_input_format() const;       // the final norm's output hf
  void release_buffers();                // the next prepare() makes them again
  void check_inputs(const Tensor& ids, const Tensor& targets) const;
  void embed(const Tensor& ids, Tensor& out);
  void embed_backward(const Tensor& ids, const Tensor& grad);
  std::int64_t head_forward(Slot& slot, const Tensor& targets);  // valid targets; the losses go to losses_
  Tensor head_input(Slot& slot);  // (N, C): hf, or (sequence parallel) all-gathered into hf_gathered
  void head_backward(Slot& slot, const Tensor& targets, float loss_scale, Tensor& grad);
  std::int64_t head_columns() const;   // this rank's real vocabulary columns of the logits (may be 0)
  std::int64_t logits_width() const;   // the logits' columns: this rank's padded vocabulary (0 without real ones)
  CrossEntropyArgs loss_args() const;  // the loss over the real columns of the padded logits
  void acquire(int unit, Pass pass) {
    if (hooks_ && unit >= 0) hooks_->acquire(unit, pass);
  }
  void release(int unit, Pass pass) {
    if (hooks_ && unit >= 0) hooks_->release(unit, pass);
  }
  void grads_ready(int unit) {
    if (hooks_ && unit >= 0) hooks_->grads_ready(unit);
  }
  void build_units();
  void acquire_block(int i, Pass pass);
  void release_block(int i, Pass pass);
  void require_whole_model(const char* what) const;

  TransformerConfig config_;
  ModelSplit split_;
  ops::Placement placement_;
  ParameterStore store_;
  std::vector<TransformerBlock> blocks_;           // local blocks, chunk by chunk
  std::vector<std::pair<int, int>> chunk_blocks_;  // per chunk: [first, last) local block
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::size_t wte_ = npos, wpe_ = npos, norm_w_ = npos, norm_b_ = npos, head_ = npos;
  IndexRange vocabulary_;                     // this rank's rows of the padded vocabulary (the shard plan's)
  int embedding_unit_ = -1, head_unit_ = -1;  // -1: not on this rank
  Buffers buffers_;
  LossLedger losses_;  // the per-token losses of the micro-batches run since the last take
  std::vector<ParamUnit> units_;
  std::vector<std::pair<int, int>> block_units_;  // per local block: its unit, its experts' unit (-1)
  bool recording_stats_ = true;
  bool inputs_staged_ = false;
  std::uint64_t buffers_generation_ = 0;
  std::vector<MoeLayerStats> moe_stats_;  // per local MoE block
  Tensor moe_totals_;                     // (moe_stats_, E + 3) f64 where the model computes
  std::vector<int> moe_stat_of_block_;    // per local block: index into moe_stats_ or -1
  BlockSelectionStats attention_stats_;
  Tensor selection_totals_;  // (5) f64 where the model computes: a device selection's stats
  UnitHooks* hooks_ = nullptr;
  DType activation_precision_ = DType::f32;
  std::unique_ptr<Fp8Scaling> fp8_;
};

}  // namespace myriad::nn
