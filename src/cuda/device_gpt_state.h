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
  std::int64_t B, T, N, C, Hq, Hkv, D, A, W, F, V, L;
  std::int64_t Vl, vocab_start, Vr;  // this rank's vocabulary shard (tp 1: Vl padded, 0, V)
  bool sequence_parallel = false;
  std::int64_t R, row_start;         // residual rows on this rank (N, 0 without sequence parallelism)
  dist::Communicator* tp = nullptr;         // host, tp > 1 only
  dist::Communicator* tp_device = nullptr;  // NCCL, tp > 1 only
  bool layernorm, swiglu, rope, bias;
  std::string head_weight;  // "wte" (tied) or "lm_head.weight"

  DeviceBuffer values, grads;        // parameter_floats() each
  std::unique_ptr<DeviceAdamW> optimizer;  // whole parameters (options.optimizer), else null
  DeviceBuffer values_h;             // 16-bit mode: the masters rounded (GEMM weights)
  std::vector<DeviceBuffer> residual;  // L + 1 buffers of (R, C): residual[l] is block l's input
  std::vector<DeviceBuffer> block_buffers;
  std::vector<DeviceBuffer> block_half_buffers;  // 16-bit mode: the blocks' 16-bit GEMM inputs
  std::vector<DeviceBuffer> shared_buffers;      // recompute: the activations every block rebuilds (f32, 16-bit)
  std::vector<BlockActivations> blocks;
  DeviceBuffer rope_cos, rope_sin;             // RoPE: (T, D / 2) tables
  DeviceBuffer lnf, lnf_mean, lnf_rstd;        // final norm: (N, C) all rows, (R), (R)
  DeviceBuffer lnf_h;                          // 16-bit mode: lnf rounded
  // 16-bit mode: output gradients rounded for the backward GEMMs (sized for the widest: N x V).
  DeviceBuffer grad_h;
  DeviceBuffer logits;                         // (N, V), becomes its own gradient in backward
  DeviceBuffer losses, ce_lse, grad_losses;    // (N)
  DeviceBuffer ids, targets;                   // (N) i32
  // tp > 1 (computed on the host): ids relative to this vocabulary shard (-1 when another rank
  // holds the row) and the loss targets of the shard's columns (ignore_index when another holds
  // them); shard_bad_index absorbs the kernels' out-of-range reports for those rows.
  DeviceBuffer shard_ids, shard_targets, shard_bad_index;
  DeviceBuffer bad_index;                      // one long long (embedding / cross-entropy checks)
  // Backward scratch shared by the blocks.
  DeviceBuffer d_res, d_res_mid, d_tmp, d_merged, d_att, d_q, d_k, d_v, d_qkv, d_fc, d_up, delta, norm_scratch;
  DeviceBuffer d_att_h, d_q_h, d_k_h, d_v_h;  // 16-bit mode: attention gradients
  // Sequence parallelism: a norm's output rows before the all-gather and a row-parallel output
  // after the reduce-scatter (R, C); a gradient of all rows (N, C); the norms' partial weight
  // gradients (2 C: weight, bias) before their all-reduce.
  DeviceBuffer h_rows, d_rows, d_full, norm_grads;
  std::int64_t norm_scratch_floats = 0;
  std::vector<DeviceGpt::FlatRange> block_ranges;  // per layer
  std::function<void(std::int64_t, DeviceGpt::FlatRange)> block_gradients_ready;
  std::size_t activation_bytes = 0;

  State(DeviceContext& context, const nn::TransformerConfig& config, std::int64_t batch, std::int64_t seq,
        DeviceGptOptions options);

  // Device pointers of a parameter's value / gradient by name ("blocks.3.attn.qkv.weight");
  // optional_* give null for a parameter the configuration does not have (biases).
  float* value(const std::string& name) const;
  float* grad(const std::string& name) const;
  float* optional_value(const std::string& name) const;
  float* optional_grad(const std::string& name) const;
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

  void forward(std::int64_t layer_count);  // embeddings, blocks, final norm, logits, losses
  void forward_block(std::int64_t layer);  // block `layer` from residual[layer] into residual[layer + 1]
  void rebuild_cheap_activations(std::int64_t layer);  // selective recompute: norm outputs, MLP activation
  // Resets the bad-index flag, runs `passes`, then reads the losses back (one synchronisation):
  // their float64 sum in token order over targets that are not ignored, and the valid count.
  nn::LossSum read_losses(const Tensor& host_targets, const std::function<void()>& passes);
  void backward(float loss_scale);         // from the losses back to the embeddings
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
  Tensor batch_targets;  // tp > 1: the host targets of the micro-batch on the device (global ids)
};

}  // namespace myriad::cuda
