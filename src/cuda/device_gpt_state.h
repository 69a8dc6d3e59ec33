// DeviceGpt::State — the device buffers of a DeviceGpt and the parameter lookup by name.
// Internal to src/cuda (device_gpt.cpp: construction, copies, optimizer; device_gpt_passes.cpp:
// forward and backward). Buffers are f32 unless named otherwise; N = batch x seq token rows,
// Hq / Hkv query / key-value heads of D, A = Hq D the attention width, W = (Hq + 2 Hkv) D the
// fused qkv width, F the MLP width — all of this rank's tensor-parallel shard (the whole model at
// tp 1); C the model width, V the real vocabulary, Vl the rows of this rank's vocabulary shard
// starting at vocab_start (padded vocabulary / tp), Vr <= Vl of them real: the logits' columns;
// R the residual stream's rows on this rank (N, or N / tp from row_start with sequence parallelism).
#pragma once

#include <library_types.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "myriad/cuda/device_adamw.h"
#include "myriad/cuda/device_buffer.h"
#include "myriad/cuda/device_gpt.h"

namespace myriad::cuda {

// Storage of one 16-bit GEMM operand value: bf16 or f16 bits, as DeviceGptOptions::operands says.
using Half16 = std::uint16_t;

// Saved activations of one transformer block (views into the block's buffers, or into the shared
// set that recompute rebuilds in backward: DeviceGptOptions::recompute).
struct BlockActivations {
  float *ln1, *ln1_mean, *ln1_rstd;  // (N, C), (R), (R): norm 1 output (all rows) and statistics (mean unused by RMSNorm)
  float *qkv;                        // (N, W)
  float *q, *k, *v, *att;            // (B, Hq, T, D), (B, Hkv, T, D) x 2, (B, Hq, T, D); q and k after RoPE
  float *lse;                        // (B, Hq, T)
  float *merged;                     // (N, A) attention output, heads merged
  float *res_mid;                    // (R, C) residual after attention
  float *ln2, *ln2_mean, *ln2_rstd;  // (N, C), (R), (R)
  float *fc;                         // (N, F) GELU input, or SwiGLU's gate
  float *up;                         // (N, F) SwiGLU's up projection (null for GELU)
  float *act;                        // (N, F) the MLP activation: gelu(fc) or silu(fc) * up
  // 16-bit mode: the GEMM inputs above rounded to the operand format, and attention's 16-bit
  // operands and output (q, k after RoPE; the tensor-core forward reads them, the backward kernel
  // too). Null in f32 mode.
  Half16 *ln1_h, *merged_h, *ln2_h, *act_h;
  Half16 *q_h, *k_h, *v_h, *att_h;
};

struct DeviceGpt::State {
  DeviceContext& context;
  nn::TransformerConfig config;
  DeviceGptOptions options;
  nn::GptModel layout_model;  // parameter layout only (allocate = false)
  std::int64_t B, T, N, C, Hq, Hkv, D, A, W, F, V;
  std::int64_t L;                                 // blocks on this rank (all of them without a pipeline)
  std::vector<int> layers;                        // the global layer of each local block
  std::vector<std::pair<int, int>> chunk_blocks;  // per chunk: local blocks [first, last)
  bool first_stage = true, last_stage = true;     // holds the embeddings / the final norm and head
  std::int64_t Vl, vocab_start, Vr;  // this rank's vocabulary shard (tp 1: Vl padded, 0, V)
  bool sequence_parallel = false;
  std::int64_t R, row_start;         // residual rows on this rank (N, 0 without sequence parallelism)
  dist::Communicator* tp = nullptr;         // host, tp > 1 only
  dist::Communicator* tp_device = nullptr;  // NCCL, tp > 1 only
  bool layernorm, swiglu, rope, bias;
  std::string head_weight;  // "wte" (tied) or "lm_head.weight"

  DeviceBuffer values, grads;        // parameter_floats() each (flat_values / flat_gradients only)
  std::unique_ptr<DeviceAdamW> optimizer;  // whole parameters (options.optimizer), else null
  DeviceBuffer values_h;             // 16-bit mode: the masters rounded (GEMM weights)
  // ---- One micro-batch's buffers (a "slot"). The members below hold the active slot's; the
  // others are parked in `parked` (SlotBuffers, swapped in by use_slot): a pipeline keeps one
  // slot per micro-batch in flight on this rank, everything else uses slot 0. Local block i of
  // chunk c reads residual[i + c] and writes residual[i + c + 1] (each chunk has its own input).
  std::vector<DeviceBuffer> residual;  // L + chunks buffers of (R, C)
  std::vector<DeviceBuffer> block_buffers;
  std::vector<DeviceBuffer> block_half_buffers;  // 16-bit mode: the blocks' 16-bit GEMM inputs
  std::vector<BlockActivations> blocks;          // per local block, views into the two above
  DeviceBuffer lnf, lnf_mean, lnf_rstd;        // last stage: final norm: (N, C) all rows, (R), (R)
  DeviceBuffer lnf_h;                          // 16-bit mode: lnf rounded
  DeviceBuffer logits;                         // last stage: (N, V), becomes its own gradient in backward
  DeviceBuffer losses, ce_lse;                 // last stage: (N)
  DeviceBuffer ids, targets;                   // (N) i32
  // tp > 1 (computed on the host): ids relative to this vocabulary shard (-1 when another rank
  // holds the row) and the loss targets of the shard's columns (ignore_index when another holds
  // them).
  DeviceBuffer shard_ids, shard_targets;
  Tensor batch_targets;                        // host targets of the micro-batch (global ids)
  std::vector<DeviceBuffer> chunk_grads;       // per chunk (R, C): dL/d output, then dL/d input
  struct SlotBuffers;
  std::vector<SlotBuffers> parked;             // per slot; the active one's entry is empty
  int active_slot = 0;
  // ---- Shared by the slots.
  std::vector<DeviceBuffer> shared_buffers;    // recompute: the activations every block rebuilds (f32, 16-bit)
  DeviceBuffer rope_cos, rope_sin;             // RoPE: (T, D / 2) tables
  // 16-bit mode: output gradients rounded for the backward GEMMs (sized for the widest: N x V).
  DeviceBuffer grad_h;
  DeviceBuffer grad_losses;                    // (N)
  DeviceBuffer shard_bad_index;                // absorbs the shard kernels' out-of-range reports
  DeviceBuffer bad_index;                      // one long long (embedding / cross-entropy checks)
  // Backward scratch shared by the blocks.
  DeviceBuffer d_res_mid, d_tmp, d_merged, d_att, d_q, d_k, d_v, d_qkv, d_fc, d_up, delta, norm_scratch;
  DeviceBuffer d_att_h, d_q_h, d_k_h, d_v_h;  // 16-bit mode: attention gradients
  // Sequence parallelism: a norm's output rows before the all-gather and a row-parallel output
  // after the reduce-scatter (R, C); a gradient of all rows (N, C); the norms' partial weight
  // gradients (2 C: weight, bias) before their all-reduce.
  DeviceBuffer h_rows, d_rows, d_full, norm_grads;
  std::int64_t norm_scratch_floats = 0;
  // Units of layout_model (nn::GptModel::units()): each local block's, the embeddings' and the
  // head's (-1 when this stage holds none).
  std::vector<int> block_units;
  int embedding_unit = -1, head_unit = -1;
  std::function<void(int)> unit_gradients_ready;
  UnitGradientStore* gradient_store = nullptr;  // flat_gradients false: where the units' gradients live
  UnitValueStore* value_store = nullptr;        // flat_values false: where the units' values live
  // flat_values false: units the forward kept acquired for the backward that follows it (the
  // head's, and the last block's), each released once the backward is done with it.
  std::vector<int> held_units;
  float* shared_f32 = nullptr;    // the shared activations' carving bases (recompute)
  Half16* shared_h16 = nullptr;
  std::size_t shared_bytes = 0;   // activations and scratch shared by the slots
  std::size_t slot_bytes = 0;     // one slot's buffers

  State(DeviceContext& context, const nn::TransformerConfig& config, std::int64_t batch, std::int64_t seq,
        DeviceGptOptions options);

  // Device pointers of a parameter's value / gradient by name ("blocks.3.attn.qkv.weight");
  // optional_* give null for a parameter the configuration does not have (biases).
  float* value(const std::string& name) const;
  float* grad(const std::string& name) const;
  float* optional_value(const std::string& name) const;
  float* optional_grad(const std::string& name) const;
  float* gradient_of(const nn::Parameter& p) const;  // in grads, or in its unit's gradient_store buffer
  float* value_of(const nn::Parameter& p) const;     // in values, or in its unit's value_store buffer
  int unit_of(const nn::Parameter& p) const;
  // flat_values false: value_store's acquire / release of a unit (-1: none); else nothing.
  void acquire_values(int unit, bool forward) const {
    if (value_store && unit >= 0) value_store->acquire(unit, forward);
  }
  void release_values(int unit) const {
    if (value_store && unit >= 0) value_store->release(unit);
  }
  // Releases `unit` and, when the forward held it for this backward, that acquisition too.
  void release_after_backward(int unit);
  bool tied_head() const { return head_weight == "wte"; }
  void gradients_ready(int unit) const {  // reports a unit final (unit_gradients_ready)
    if (unit >= 0 && unit_gradients_ready) unit_gradients_ready(unit);
  }
  const Half16* value_h(const std::string& name) const;  // 16-bit mode only
  void refresh_half_weights();  // values_h <- values (16-bit mode; no-op otherwise)
  // 16-bit operands (options.operands bf16 or f16) or f32 ones.
  bool half_operands() const { return options.operands != DType::f32; }
  cudaDataType_t half_type() const { return options.operands == DType::f16 ? CUDA_R_16F : CUDA_R_16BF; }
  // f32 <-> the 16-bit operand format over n values (round to nearest even; widening is exact).
  void to_half(const float* x, Half16* out, std::int64_t n) const;
  void from_half(const Half16* x, float* out, std::int64_t n) const;
  std::string block_name(std::int64_t layer, const char* suffix) const {
    return "blocks." + std::to_string(layer) + "." + suffix;
  }

  // Slots: allocate this slot's buffers into the members (construction, add_slot); append one
  // more slot (parked); make `slot` the active one.
  void allocate_slot();
  void add_slot();
  void use_slot(int slot);
  void swap_slot(SlotBuffers& other);
  bool chunk_is_first(int chunk) const { return chunk == 0 && first_stage; }
  bool chunk_is_last(int chunk) const { return chunk == static_cast<int>(chunk_blocks.size()) - 1 && last_stage; }
  // The active slot's passes over chunk c: embeddings (first stage), its blocks, final norm,
  // logits and losses (last stage); the backward from the losses or chunk_grads[c] back to the
  // embeddings or chunk_grads[c] (dL/d the chunk's input).
  // `backward_follows` (flat_values false): keep the head's units acquired for backward_chunk.
  void forward_chunk(int chunk, bool backward_follows = false);
  void backward_chunk(int chunk, float loss_scale);
  void embed();
  void embed_backward(const float* grad_x0);
  void head_forward(const float* x);
  void head_backward(float loss_scale, const float* x, float* grad_x);
  // Local block from residual[row] into residual[row + 1]; `recompute` (full recompute in the
  // backward) rebuilds the activations only, without the block output.
  void forward_block(int block, int row, bool recompute = false);
  void block_backward(int block, int row, float* grad);  // grad: dL/d output in, dL/d input out
  void rebuild_cheap_activations(int block, int row);  // selective recompute: norm outputs, MLP activation
  // Resets the bad-index flag, runs `passes`, then reads the losses back (one synchronisation):
  // their float64 sum in token order over targets that are not ignored, and the valid count.
  nn::LossSum read_losses(const Tensor& host_targets, const std::function<void()>& passes);
  bool tensor_parallel() const { return tp_device != nullptr; }
  // tp > 1: x (n floats on the device) <- its sum over the tensor-parallel group; else nothing.
  void reduce_over_tp(float* x, std::int64_t n) const;
  // Sequence parallelism over the tp group: rows (R, C) of every rank -> all (N, C), and the sum
  // over ranks of all (N, C) -> this rank's rows (R, C).
  void all_gather_rows(const float* rows, float* all) const;
  void reduce_scatter_rows(const float* all, float* rows) const;
  // The model's norm over the R residual rows `x` into `out` (N, C): directly, or (sequence
  // parallel) into h_rows and all-gathered.
  void norm_to_all_rows(const float* x, const float* weight, const float* bias, float* out, float* mean, float* rstd);
  // The backward of a column-parallel input: `partial` (N, C) holds this rank's part of the
  // gradient of all rows; returns the complete gradient of this rank's R rows (all-reduced in
  // place, or reduce-scattered into d_rows; tp 1: `partial` itself).
  float* reduce_input_grad(float* partial);
  // The gradient of all N rows from this rank's R rows (sequence parallel: all-gathered into
  // d_full; otherwise `rows` itself).
  const float* all_rows_grad(const float* rows);
  // The norm backward over the R rows, the weight (and bias) gradients added into gw / gb — with
  // sequence parallelism summed over tp first (each rank's rows give a partial sum).
  void norm_backward_rows(const float* grad_out, const float* x, const float* weight, const float* mean,
                          const float* rstd, float* grad_x, float* grad_weight, float* grad_bias);
  // tp > 1, after the shard's cross-entropy forward: the per-token losses and lse of the whole
  // vocabulary from every shard's (host collectives over tp; one synchronisation).
  void combine_vocab_parallel_losses();
};

// A parked slot's buffers: the per-slot members of State (see there), swapped in and out whole.
struct DeviceGpt::State::SlotBuffers {
  std::vector<DeviceBuffer> residual, block_buffers, block_half_buffers;
  std::vector<BlockActivations> blocks;
  DeviceBuffer lnf, lnf_mean, lnf_rstd, lnf_h, logits, losses, ce_lse, ids, targets, shard_ids, shard_targets;
  Tensor batch_targets;
  std::vector<DeviceBuffer> chunk_grads;
};

}  // namespace myriad::cuda
