// DeviceGpt — the model of nn::GptModel trained on one GPU: parameters, gradients and AdamW
// moments in device memory (f32 masters), forward and backward through the kernels of kernels/
// and cuBLASLt, the optimizer step on the device. One GPU per rank; optionally one rank's shard of
// a tensor-parallel group (DeviceGptOptions::tp); no pipeline split.
//
// Scope: both model families of nn::TransformerConfig — LayerNorm or RMSNorm, GELU or SwiGLU MLP,
// learned positions or RoPE, tied or untied head, with or without biases, multi-head or
// grouped-query attention — with head dim 64 or 128 (flash attention's), checked at construction
// with errors naming the key. Activations are f32 (plus 16-bit copies of the GEMM inputs in
// bf16 / f16 mode), kept for the backward or recomputed (DeviceGptOptions::recompute); memory for
// `batch` x `seq` tokens is allocated once, here.
//
// Invariants: the parameter layout is nn::ParameterStore's for the same config (same names,
// shapes and flat offsets), so load_values / values_to_host / grads_to_host exchange the store's
// flat buffers as they are, and a test compares every tensor with nn::GptModel. Gradients
// accumulate (`+=`) across forward_backward calls until zero_grads(), as on the CPU (or live per
// unit in a UnitGradientStore: DeviceGptOptions::flat_gradients); step()
// applies optim::AdamWConfig's decay exclusions and clipping like optim::AdamWOptimizer.
// All work is queued on the context's stream; forward_backward returns after the loss has been
// read back (it synchronises once per call).
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/cuda/device_context.h"
#include "myriad/dist/communicator.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/nn/transformer_config.h"
#include "myriad/optim/adamw_optimizer.h"

namespace myriad::cuda {

struct DeviceGptOptions {
  bool tf32 = false;  // f32 GEMMs on TF32 tensor cores (faster, ~1e-3 relative products)
  // The GEMM operand format: f32, or a 16-bit format (DType::bf16 or DType::f16, training.precision
  // bf16 / fp16) for tensor-core GEMMs with f32 outputs: every GEMM operand — the weights (a
  // 16-bit copy of the f32 masters, refreshed after each update), the normalised / GELU /
  // attention outputs and the output gradients — is rounded to it, and attention reads 16-bit
  // q, k, v (tensor-core forward and backward; f32 softmax inside); residual stream, norms,
  // losses, gradient sums and the optimizer stay f32. f16 overflows to inf past 65504: with a
  // loss scale the step() that sees a non-finite norm skips the update (the caller's scaler
  // lowers the scale).
  DType operands = DType::f32;
  // AdamW moments for every parameter and step() (16 bytes per parameter with the values and
  // gradients). Off when the caller runs its own optimizer over gradients() — ZeRO data
  // parallelism shards the moments over the dp ranks (train/device_trainer.h): step() and the
  // optimizer-state calls then throw.
  bool optimizer = true;
  // Activation recompute (training.recompute), as nn::GptModel: none keeps every activation;
  // selective keeps all but the norm outputs and the MLP activation, rebuilt in backward without
  // a GEMM; full keeps only each block's input and re-runs the block's forward in backward (up to
  // the MLP activation: the down projection's output is not needed again). What
  // is not kept lives in one set shared by all blocks (activation_bytes() shows the saving).
  nn::Recompute recompute = nn::Recompute::none;
  // The flat gradient buffer (parameter_floats(), accumulated across backwards until
  // zero_grads()). false: none — every backward writes each unit's gradients into a
  // UnitGradientStore's buffers (set_unit_gradient_store), which accumulates them itself; then
  // gradients(), grads_to_host() and the optimizer are unavailable.
  bool flat_gradients = true;
  // The flat f32 values (parameter_floats()) and their 16-bit copy. false: none — the passes read
  // each unit's values (and 16-bit copy) from a UnitValueStore (set_unit_value_store) between its
  // acquire and release; no optimizer, no load_values / values().
  bool flat_values = true;
  // Tensor parallelism (Megatron's, without sequence parallelism): `tp` is the host communicator
  // of the tensor-parallel group — the parameter layout is then nn::GptModel's under
  // ModelSplit{tp} (this rank's shards: heads, MLP columns, vocabulary rows) — and `tp_device`
  // the same group for device tensors (an NcclCommunicator): the row-parallel outputs and the
  // column-parallel input gradients are all-reduced over it (four per block and step), the
  // embedding lookup too. The vocabulary-parallel loss combines the shards' per-token log-sum-exp
  // and target logits over `tp` on the host (2 N values per rank and micro-batch). Not owned; both
  // null (or of size 1): no tensor parallelism.
  dist::Communicator* tp = nullptr;
  dist::Communicator* tp_device = nullptr;
  // Sequence parallelism (tp > 1, Megatron's): the residual stream, the norms' inputs and their
  // statistics hold this rank's N / tp token rows; each norm's output is all-gathered for the
  // column-parallel GEMMs, the row-parallel outputs reduce-scattered back to rows (instead of
  // all-reduced), the norms' weight gradients (partial over the rows) all-reduced. N = batch x
  // seq must be divisible by tp.
  bool sequence_parallel = false;
  // Pipeline parallelism: this rank's stage of nn::GptModel under the same ModelSplit fields —
  // `chunks` (global layers per virtual stage; empty: every layer in one chunk), whether it holds
  // the embeddings (first_stage) and the final norm and head (last_stage). A stage is driven by
  // forward_chunk / backward_chunk (train/pipeline_executor.h through the device trainer).
  std::vector<std::vector<int>> chunks;
  bool first_stage = true, last_stage = true;
};

// Where the gradients of a parameter unit live during one backward when the model keeps no flat
// gradient buffer (ZeRO 2: a unit's gradients exist only from its backward until they are
// reduce-scattered into the rank's shard).
class UnitGradientStore {
 public:
  virtual ~UnitGradientStore() = default;
  // Device f32 storage of units()[unit].size() floats for unit `unit`'s gradients, zeroed when first
  // handed out in a backward; the same pointer until the unit's gradients are reported ready.
  virtual float* unit_gradients(int unit) = 0;
};

// Where the values of a parameter unit live when the model keeps no flat values (ZeRO 3: each
// rank holds a shard; a unit is all-gathered for the passes that read it). The model acquires a
// unit before the kernels that read it are queued and releases it after (the release may free
// the buffer: later work that reuses the memory must be ordered after those kernels, as the
// caching allocator's same-stream reuse and NCCL's wait for the compute stream are).
class UnitValueStore {
 public:
  virtual ~UnitValueStore() = default;
  // `forward`: the pass runs in unit order (forward) or in reverse (backward), for prefetching.
  // Acquisitions nest (a tied head acquires the embeddings' unit again).
  virtual void acquire(int unit, bool forward) = 0;
  virtual void release(int unit) = 0;
  // Device f32 values of an acquired unit (units()[unit].size() floats).
  virtual float* unit_values(int unit) = 0;
  // 16-bit operands (DeviceGptOptions::operands bf16 / f16): the same values rounded to that
  // format (round to nearest even), for the GEMMs.
  virtual const std::uint16_t* unit_values_h(int unit) = 0;
};

class DeviceGpt {
 public:
  DeviceGpt(DeviceContext& context, const nn::TransformerConfig& config, std::int64_t batch, std::int64_t seq,
            DeviceGptOptions options = {});
  ~DeviceGpt();
  DeviceGpt(const DeviceGpt&) = delete;
  DeviceGpt& operator=(const DeviceGpt&) = delete;

  const nn::TransformerConfig& config() const;
  // Names, shapes and flat offsets of the parameters (values are not allocated in it).
  const nn::ParameterStore& layout() const;
  std::int64_t parameter_floats() const;  // length of the flat buffers

  void load_values(const Tensor& flat_values);  // host f32 (parameter_floats())
  Tensor values_to_host() const;
  Tensor grads_to_host() const;
  // The flat gradients as a device tensor (f32 [parameter_floats()], a view: no copy), for the
  // data-parallel all-reduce over NCCL (flat_gradients only).
  Tensor gradients();
  // The flat f32 master values as a device tensor (a view), for an optimizer outside the model
  // and the ZeRO all-gather; after changing them call values_changed() (refreshes the 16-bit
  // weight copy).
  Tensor values();
  void values_changed();
  // The parameter units of this rank's layout (nn::GptModel::units(): the embeddings, one unit per
  // local block, the final norm and head — those this stage holds), contiguous flat ranges.
  const std::vector<nn::ParamUnit>& units() const;
  // Called by every backward once unit `unit`'s gradients are final for that backward (its last
  // gradient kernel is queued on the context's stream): the head unit after the loss's backward,
  // each block after its own, the embeddings last (a tied copy on the last pipeline stage: after
  // the head's). Empty function: none.
  void set_unit_gradients_ready(std::function<void(int unit)> callback);
  // Without flat gradients (DeviceGptOptions::flat_gradients false) the backward writes each
  // unit's gradients where `store` says (not owned; set before the first backward).
  void set_unit_gradient_store(UnitGradientStore* store);
  // Without flat values (DeviceGptOptions::flat_values false): where the passes read each unit's
  // values (not owned; set before the first pass).
  void set_unit_value_store(UnitValueStore* store);
  void zero_grads();

  // ids, targets: host (batch, seq) i32; targets may hold nn::GptModel::kIgnoreIndex. Adds
  // d(loss_scale x sum of token losses) to the gradients; returns the sum and valid count.
  nn::LossSum forward_backward(const Tensor& ids, const Tensor& targets, float loss_scale);
  // Forward only (evaluation): the loss sum and valid count of (rows <= batch, seq) host i32
  // ids/targets; gradients untouched.
  nn::LossSum forward_loss(const Tensor& ids, const Tensor& targets);
  // (forward_backward and forward_loss need every layer: one chunk, first and last stage.)

  // Pipeline pieces, as nn::GptModel's (nn/pipeline_stage.h): per micro-batch buffer set
  // ("slot", 0..slots()-1, each a full set of activations), forward_chunk(c) reads the ids
  // (first stage) or chunk_input(c), writes chunk_output(c) and on the last stage returns the
  // loss (one synchronisation); backward_chunk(c) reads chunk_grad(c) = dL/d output (or starts
  // from the loss) and leaves dL/d input there. The exchanged tensors are device (R, C) views.
  // ids/targets: host i32 (rows <= batch, seq), read on the first and last stage (fewer rows are
  // padded with ignored targets).
  int num_chunks() const;
  void prepare_slots(int slots);  // allocates slots up to `slots` (kept)
  int slots() const;
  Tensor chunk_input(int chunk, int slot);
  Tensor chunk_output(int chunk, int slot);
  Tensor chunk_grad(int chunk, int slot);
  nn::LossSum forward_chunk(int chunk, int slot, const Tensor& ids, const Tensor& targets);
  void backward_chunk(int chunk, int slot, float loss_scale);
  // Global-norm clipping + AdamW over every parameter; returns what AdamWOptimizer::step does.
  // `unscale` multiplies the gradients first (1 / loss scale with fp16's loss scaling: the norm
  // reported and clipped is the unscaled one). A non-finite norm skips the update (stats.skipped;
  // parameters, moments and the step count untouched).
  optim::OptimizerStepStats step(float lr, const optim::AdamWConfig& config, float unscale = 1.0f);
  std::int64_t steps_taken() const;

  // AdamW state in optim::AdamWOptimizer's layout (whole parameters back to back in store order,
  // no padding), for checkpoints and for continuing a CPU run on the GPU or back.
  void load_optimizer_state(const Tensor& m, const Tensor& v, std::int64_t steps_taken);
  void optimizer_state_to_host(Tensor& m, Tensor& v) const;

  // Bytes of device memory held for activations and scratch, every slot's (besides the
  // parameter buffers): saved_activation_bytes() (the slots' buffers, kept from forward to
  // backward) + scratch_bytes() (shared by the slots: recompute's set, backward scratch).
  std::size_t activation_bytes() const;
  std::size_t saved_activation_bytes() const;
  std::size_t scratch_bytes() const;
  // Bytes of the parameter values (f32 masters, plus their 16-bit copy) and of the gradients.
  std::size_t parameter_bytes() const;
  std::size_t gradient_bytes() const;

  struct State;  // buffers and the forward/backward passes (device_gpt*.cpp)

 private:
  std::unique_ptr<State> state_;
};

}  // namespace myriad::cuda
