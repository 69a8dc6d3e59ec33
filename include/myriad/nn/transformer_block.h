// TransformerBlock — one pre-norm decoder block with explicit forward and backward:
//
//   x_mid = x + proj(attention(qkv(norm1(x))))           (RoPE on q, k for LLaMA style)
//   y     = x_mid + mlp(norm2(x_mid))                      (GELU: proj(gelu(fc(.)));
//                                                          SwiGLU: down(silu(gate(.)) * up(.));
//                                                          MoE blocks: the MoeLayer, moe_layer.h)
//
// Shapes: x, y (B, T, C), f32 or — the residual stream under mixed precision — bf16 / f16 (the
// norms read x widened; y is the f32 sum rounded once; x_mid stays f32); qkv (B, T, (Hq + 2 Hkv) D) with q | k | v
// column blocks; attention reads q, k, v as strided (B, H, T, D) views of qkv (or of the RoPE outputs), no copies.
// BlockActivations holds what backward needs; which of its tensors are private to the block and
// which are shared scratch (rebuilt by recompute()) is decided by the Recompute mode when the
// model allocates them. Gradient contract: parameter grads accumulate (`+=`); backward turns
// `grad` (dL/dy on entry) into dL/dx in place.
//
// Under a ModelSplit with tp > 1 (model_split.h) the block holds its rank's heads and MLP columns
// and its activations cross the group through the split's TensorParallel (nn/tensor_parallel.h);
// the qkv width, attention output width and MLP width of the tensors below are the local ones
// (local_widths(): what the shard plan gives the rank of the qkv and MLP weights). With sequence parallelism the
// residual-stream tensors (x, y, x_mid, grad, norm statistics) hold this rank's N/tp token rows, shaped (1, N/tp, C);
// h1 and h2 are the all-gathered full (B, T, C) norm outputs that the column-parallel layers read.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "myriad/nn/model_split.h"
#include "myriad/nn/block_selection.h"
#include "myriad/nn/fp8_linear.h"
#include "myriad/nn/fp8_scaling.h"
#include "myriad/nn/moe_layer.h"
#include "myriad/nn/paged_kv_cache.h"
#include "myriad/nn/parameter_store.h"
#include "myriad/nn/transformer_config.h"
#include "myriad/ops/attention.h"

namespace myriad::nn {

struct BlockActivations {
  Tensor ln1_mean, ln1_rstd;                  // (B, T)        layernorm: mean unused for rmsnorm
  Tensor h1;                                  // (B, T, C)     norm1 output (f32 or 16-bit: ActivationSlot)
  Tensor qkv;                                 // (B, T, QKV)
  Tensor q_rot, k_rot;                        // (B, T, Hq, D), (B, T, Hkv, D): RoPE only (f32 or 16-bit)
  Tensor att;                                 // (B, T, C)     attention output, heads concatenated (f32 or 16-bit)
  Tensor lse;                                 // (B, Hq, T)
  Tensor x_mid;                               // (B, T, C)     residual after attention
  Tensor ln2_mean, ln2_rstd;                  // (B, T)
  Tensor h2;                                  // (B, T, C)     norm2 output (f32 or 16-bit)
  Tensor fc;                                  // (B, T, F)     GELU input, or SwiGLU gate
  Tensor up;                                  // (B, T, F)     SwiGLU only
  Tensor act;                                 // (B, T, F)     MLP activation (f32 or 16-bit)
  std::shared_ptr<MoeActivations> moe;        // MoE blocks: the expert MLP's (sizes set by the routing)
  std::shared_ptr<const BlockLayout> layout;  // block-sparse attention: the forward's host layout
  BlockSelectionStats selection;              // ... and what it kept (the last forward's)

  // Or, selecting on a device: the forward's layout (ops/block_selection.h, stays on the device)
  // and the model's totals the selection adds its stats to (set around a recorded forward).
  std::shared_ptr<const SelectedBlocks> selected;
  Tensor selection_totals;

  // Sequence parallelism, after recompute(): h1 (and a dense MLP's h2) hold only this rank's rows
  // (TensorParallel::own_rows_of); backward gathers the rest overlapped with the weight gradients'
  // GEMMs. The forward gathers them whole (false).
  bool norm_rows_only = false;
};

// Scratch shared by every block during backward (and full recompute).
struct BlockScratch {
  Tensor d_h, d_att;         // (B, T, C) (d_att: local heads)
  Tensor d_tmp;              // residual-stream shape
  Tensor y_wide;             // residual-stream shape, f32: a block output's sum before it is rounded
                             // into a 16-bit residual stream; a full recompute's discarded output
  Tensor d_full, d_hs;       // sequence parallel: gathered (B, T, C) grad, (1, N/tp, C) shard
  Tensor h_rows;             // sequence parallel: a norm's output rows before the all-gather
  Tensor norm_grads;         // the norms' gradients (4 C), summed over the group, then added
  Tensor d_qkv;              // (B, T, QKV)
  Tensor d_fc, d_up, d_act;  // (B, T, F)
};

// One entry per BlockActivations member: its shape and which recompute modes keep it. Under
// sequence parallelism the gathered norm outputs h1, h2 are never kept: backward re-runs the norm
// on the saved rows and all-gathers again (Megatron's choice: keep 1/tp, pay one all-gather).
struct ActivationSlot {
  Tensor BlockActivations::*member;
  Shape shape;
  bool kept_by_selective;
  bool kept_by_none = true;
  bool dense_mlp = false;    // the dense MLP's (fc, up, act): an MoE block has none
  DType dtype = DType::f32;  // f32, or the GEMM operand format for the inputs only GEMMs read
  bool kept(Recompute mode) const {
    return mode == Recompute::none ? kept_by_none : mode == Recompute::selective && kept_by_selective;
  }
};
// The widths of this rank's share of a block: its query and key/value heads and MLP columns, read
// from the rows the shard plan gives it of the fused qkv weight and the MLP's input weight.
struct LocalWidths {
  std::int64_t heads = 0, kv_heads = 0, ffn = 0, head_dim = 0;
  std::int64_t qkv() const { return (heads + 2 * kv_heads) * head_dim; }
};
LocalWidths local_widths(const TransformerConfig& config, const ModelSplit& split);
// The two weights whose split sets the widths, declared whole (their names under `prefix`).
ParameterSpec qkv_weight_spec(const TransformerConfig& config, const std::string& prefix);
ParameterSpec mlp_in_weight_spec(const TransformerConfig& config, const std::string& prefix);

// `gemm_inputs`: the format the activations only GEMMs read are kept in — h1, h2, act, and where
// sixteen_bit_attention the attention's output and rotated q, k — the GEMM operand format under
// mixed precision (nn/linear.h), f32 otherwise. h1, h2 and act stay f32 under sequence
// parallelism (the gathers), and h2 in a model with MoE layers (the router).
std::vector<ActivationSlot> block_activation_slots(const TransformerConfig& config, const ModelSplit& split,
                                                   std::int64_t B, std::int64_t T, DType gemm_inputs = DType::f32);
// Whether the block's attention takes 16-bit products under mixed precision (ops/attention.h):
// dense attention without context parallelism at head dim 64 or 128. Its output then holds values
// of the format, and block_activation_slots keeps it (the proj layer's input) in the format too, as
// the rotated q, k (RoPE writes them in the format; only the attention reads them).
bool sixteen_bit_attention(const TransformerConfig& config, const ModelSplit& split);
// The formats of the backward's gradients that only GEMMs and a bias's column sums read, kept in
// `gemm_inputs` (as block_activation_slots; f32 under FP8, whose GEMMs quantise from f32): the
// attention's output and q, k, v gradients (d_att, d_qkv) where sixteen_bit_attention — its
// products round them to the format anyway — SwiGLU's gate and up gradients (d_fc, d_up), and a
// GELU MLP's d_fc where its pre-activation is kept in the format (linear_dgelu_backward writes the
// gradient in the pre-activation's type; f32 under sequence parallelism). A bias gradient is then
// the column sums of the 16-bit values.
struct BlockGradientFormats {
  DType attention = DType::f32;  // d_att, d_qkv
  DType mlp = DType::f32;        // d_fc, d_up (SwiGLU)
};
BlockGradientFormats block_gradient_formats(const TransformerConfig& config, const ModelSplit& split,
                                            DType gemm_inputs);
BlockScratch make_block_scratch(const ops::Placement& placement, const TransformerConfig& config,
                                const ModelSplit& split, std::int64_t B, std::int64_t T,
                                DType gemm_inputs = DType::f32);
// Shape of the residual stream of a (B, T) micro-batch: (B, T, C), or (1, B T / tp, C) sequence parallel.
Shape residual_shape(const TransformerConfig& config, const ModelSplit& split, std::int64_t B, std::int64_t T);

// A block's dense linear layers, in the order of their FP8 scaling slots.
enum class BlockLinear : int { qkv = 0, proj = 1, fc = 2, up = 3, out = 4 };
inline constexpr int kFp8LinearsPerBlock = 5;
// What FP8 slot (`linear`, `role`) of a model of `config` quantises, for messages: "the input of
// blocks.3.mlp.fc.weight", "blocks.3.attn.qkv.weight", "the output gradient of ...".
std::string fp8_tensor_name(const TransformerConfig& config, std::int64_t linear, Fp8Role role);

class TransformerBlock {
 public:
  // Parameter names are "blocks.<layer>.…" whatever the split.
  // Registers this block's parameters (its tp share under `split`) in `store`.
  TransformerBlock(const TransformerConfig& config, const ModelSplit& split, int layer, ParameterStore& store);

  int layer() const { return layer_; }
  // MoE block (its MLP is a MoeLayer): the layer; null for a dense block.
  const MoeLayer* moe() const { return moe_ ? &*moe_ : nullptr; }
  // The GEMM operand format of the block's linear layers (nn/linear.h; mixed precision).
  void set_gemm_operands(DType format) {
    operands_ = format;
    if (moe_) moe_->set_gemm_operands(format);
  }
  // training.precision fp8: the block's dense linear layers run FP8 GEMMs under `scaling`'s
  // delayed scales (nn/fp8_linear.h; slots kFp8LinearsPerBlock * layer + BlockLinear); null: the
  // GEMM operand format above. An MoE block's experts and router keep the operand format.
  void set_fp8_scaling(Fp8Scaling* scaling) { fp8_ = scaling; }
  void forward(const ParameterStore& store, const Tensor& x, Tensor& y, BlockActivations& acts,
               BlockScratch& scratch) const;
  // Rebuilds the activations that `mode` did not keep (none: nothing, or under sequence parallelism
  // the gathered norm outputs; selective: norm outputs and MLP activation; full: everything, by
  // re-running forward).
  void recompute(const ParameterStore& store, const Tensor& x, BlockActivations& acts, BlockScratch& scratch,
                 Recompute mode) const;
  // `loss_scale`: the LM loss's gradient seed, which also scales an MoE block's auxiliary losses.
  void backward(ParameterStore& store, const Tensor& x, const BlockActivations& acts, BlockScratch& scratch,
                Tensor& grad, const AuxLossScale& loss_scale) const;
  // A batched decoding step (transformer_block_decode.cpp): x, y (1, N, C) hold the new rows of
  // `seqs` one sequence after another; appends their k, v to the sequences' blocks of `cache` and
  // writes the block output to y.
  void decode(const ParameterStore& store, const Tensor& x, const std::vector<DecodeSequence>& seqs,
              PagedKvCache& cache, Tensor& y) const;

 private:
  TransformerConfig config_;
  ModelSplit split_;
  int layer_;
  LocalWidths widths_;  // this rank's heads and MLP columns
  DType operands_ = DType::f32;
  Fp8Scaling* fp8_ = nullptr;  // not owned (the model's)
  // Indices into the ParameterStore; npos when absent (no bias, no RoPE-specific params, ...).
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::size_t norm1_w_ = npos, norm1_b_ = npos, qkv_w_ = npos, qkv_b_ = npos, proj_w_ = npos, proj_b_ = npos;
  std::size_t norm2_w_ = npos, norm2_b_ = npos, fc_w_ = npos, fc_b_ = npos, up_w_ = npos, out_w_ = npos, out_b_ = npos;
  std::optional<MoeLayer> moe_;

  void norm_forward(const ParameterStore& store, std::size_t w, std::size_t b, const Tensor& x, Tensor& out,
                    Tensor& mean, Tensor& rstd) const;
  void norm_backward(const ParameterStore& store, std::size_t w, const Tensor& x, const Tensor& mean,
                     const Tensor& rstd, const Tensor& grad_out, Tensor& grad_x, Tensor& grad_w, Tensor& grad_b) const;
  void mlp_activation(const BlockActivations& acts, Tensor& act) const;
  void norm_and_gather(const ParameterStore& store, std::size_t w, std::size_t b, const Tensor& x, Tensor& rows,
                       Tensor& full, Tensor& mean, Tensor& rstd) const;
  void norm_gather_and(const ParameterStore& store, std::size_t w, std::size_t b, const Tensor& x, Tensor& rows,
                       Tensor& full, Tensor& mean, Tensor& rstd, const TensorParallel::RowsConsumer& consume) const;
  // `which`: the layer's FP8 slot; nullopt (decoding) computes in the operand format. A 16-bit
  // `out` (the residual stream under mixed precision) gets the f32 sum, formed in `wide`, rounded
  // once; `residual` may be 16-bit.
  void row_parallel_output(std::optional<BlockLinear> which, const Tensor& in, const Parameter& weight,
                           const Tensor& bias, const Tensor& residual, Tensor& partial, Tensor& out,
                           Tensor* wide = nullptr) const;
  // A layer run block by block (the sequence-parallel rings) quantises its FP8 weight at the first
  // block and reuses it: `once` holds it for the layer's pass (null: quantise per call).
  using Fp8WeightOnce = std::optional<Fp8Weight>;
  void dense_linear_forward(std::optional<BlockLinear> which, const Tensor& in, const Parameter& weight,
                            const Tensor& bias, Tensor& out, Fp8WeightOnce* once = nullptr) const;
  void dense_linear_backward(BlockLinear which, const Tensor& in, Parameter& weight, const Tensor& grad_out,
                             Tensor& grad_in, bool accumulate, Tensor& grad_bias) const;
  std::int64_t fp8_slot(BlockLinear which) const;
  bool fuses_gelu(const Parameter& fc_weight) const;
  Tensor gathered_grad(const Tensor& grad, BlockScratch& s) const;
  Tensor gathered_grad_overlapped(
      const Tensor& grad, BlockScratch& s,
      const std::function<void(const Tensor& dy, std::int64_t begin, std::int64_t end)>& input_grad) const;
  void dense_input_grad(BlockLinear which, Parameter& weight, const Tensor& grad_out, Tensor& grad_in, bool accumulate,
                        Fp8WeightOnce& once) const;
  Tensor reduced_input_grad(BlockScratch& s) const;
  // A column-parallel layer (or the MLP's pair) read by the backward of its input's gather.
  struct ColumnLinear {
    BlockLinear which;
    std::size_t weight;
    Tensor grad_out;   // the layer's output gradient
    Tensor grad_bias;  // undefined: none
  };
  void row_parallel_backward(BlockLinear which, const Tensor& in, Parameter& weight, const Tensor& grad,
                             Tensor& grad_in, Tensor& grad_bias, BlockScratch& s) const;
  Tensor column_parallel_backward(ParameterStore& store, const Tensor& in, bool gather_in,
                                  std::vector<ColumnLinear> layers, BlockScratch& s) const;
  void norm_rows(const ParameterStore& store, std::size_t w, std::size_t b, const Tensor& x, Tensor& full, Tensor& mean,
                 Tensor& rstd) const;
  void fp8_first_scale(BlockLinear which, Fp8Role role, const Tensor& whole) const;
  IndexRange moe_sequences(std::int64_t B) const;
  DType attention_operands() const;  // 16-bit attention products or f32 (transformer_block.cpp)
  AttentionArgs attention_args(const Tensor& q, const Tensor& k, BlockActivations& a) const;
  void rope_at_positions(bool backward, const Tensor& x, Tensor& out) const;
  void moe_forward(const ParameterStore& store, BlockActivations& a, BlockScratch& s, Tensor& y) const;
  void moe_backward(ParameterStore& store, const BlockActivations& a, BlockScratch& s, const Tensor& grad,
                    const AuxLossScale& loss_scale) const;
  Tensor norm_grad_target(std::size_t index, BlockScratch& s, int slot) const;
};

}  // namespace myriad::nn
