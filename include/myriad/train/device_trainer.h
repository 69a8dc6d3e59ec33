// DeviceTrainer — the GPU half of the Engine when training.device is cuda: the model's working
// state (parameters, gradients, AdamW moments) lives on the rank's GPU in a cuda::DeviceGpt, and
// the Engine's step, evaluation and optimizer update run there. The host nn::GptModel and
// optim::AdamWOptimizer stay the master copy for everything else (checkpoints, generation,
// export): the Engine uploads them at start and after a load, and downloads before it reads them.
//
// Data parallelism over NCCL: every dp rank runs its micro-batches on its GPU; during the last
// micro-batch's backward each transformer block's gradients are all-reduced over the dp group as
// soon as they are final (on NCCL's stream, overlapping the remaining backward), the rest after
// it (the loss is already normalised by the global token count); every replica applies the same
// update.
//
// make_device_trainer picks the GPU from the local rank (core/local_device.h) and throws
// myriad::Error naming training.device when this build has no CUDA backend, no GPU is visible,
// or the model is outside DeviceGpt's scope (the message names the model.* key).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/dist/communicator.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/nn/transformer_config.h"
#include "myriad/dist/pipeline_schedule.h"
#include "myriad/dist/rank_grid.h"
#include "myriad/optim/adamw_optimizer.h"
#include "myriad/train/data_parallel.h"
#include "myriad/train/memory_report.h"
#include "myriad/train/pipeline_executor.h"

namespace myriad::train {

class DeviceTrainer {
 public:
  virtual ~DeviceTrainer() = default;

  virtual std::string describe() const = 0;  // "cuda:0 (NVIDIA H200), bf16 GEMMs, 1.2 GiB activations"
  // Host -> device: parameter values and the optimizer's moments and update count.
  virtual void upload(nn::ParameterStore& store, optim::AdamWOptimizer& optimizer) = 0;
  // Device -> host, the same state.
  virtual void download(nn::ParameterStore& store, optim::AdamWOptimizer& optimizer) = 0;
  virtual void zero_grads() = 0;
  // Before each micro-batch's forward_backward: `last` lets data parallelism start each block's
  // gradient all-reduce during the last micro-batch's backward (earlier ones only accumulate).
  virtual void begin_micro_batch(bool last) = 0;
  // (micro_batch, seq_len) host i32 ids/targets; gradients accumulate until zero_grads().
  virtual nn::LossSum forward_backward(const Tensor& ids, const Tensor& targets, float loss_scale) = 0;
  // Up to micro_batch rows; gradients untouched. With a pipeline: the micro-batch through every
  // stage, the loss on the last stage's ranks (zero elsewhere).
  virtual nn::LossSum forward_loss(const Tensor& ids, const Tensor& targets) = 0;
  // Pipeline parallelism (pp > 1): the step's micro-batches through the schedule on this rank's
  // stage (train/pipeline_executor.h over the device stage, activations and gradients over NCCL);
  // gradients accumulate as forward_backward's do. The loss is the last stage's.
  virtual PipelineStepResult run_pipeline(const std::vector<Tensor>& ids, const std::vector<Tensor>& targets,
                                          float loss_scale) = 0;
  // Completes the step's gradients: with a pipeline and tied embeddings, the first and last
  // stages add each other's embedding gradient; then the sum over the dp group (NCCL) — the
  // blocks' reductions started during the last backward (without a pipeline), the rest now.
  virtual void reduce_gradients() = 0;
  // `unscale` = 1 / the loss scale (fp16); a non-finite gradient norm skips the update.
  virtual optim::OptimizerStepStats step(float lr, const optim::AdamWConfig& config, float unscale) = 0;

  // Device memory this rank's training holds, by role (bytes of its buffers; pipeline slots as
  // allocated so far): parameters = f32 masters (+ the 16-bit copy; ZeRO 3: the value shard),
  // gradients = the flat gradients (ZeRO 0, 1) + the shard (ZeRO >= 1), optimizer = AdamW moments
  // (the shard under ZeRO >= 1), activations = saved from forward to backward in every slot,
  // scratch = shared activations, backward scratch and the cuBLASLt workspace, comm buffers = the
  // most unit gradient buffers and gathered units (ZeRO >= 2) held at once so far.
  virtual MemoryReport memory() const = 0;
  // The statistics of this trainer's device (NCCL) communicator for `axis` (dp, tp or pp; empty
  // for an axis it has none on): the Engine adds them to the host groups' in its step metrics,
  // since on the device the gradient reductions, tp collectives and pipeline exchanges run there.
  virtual dist::CommStats comm_stats(dist::Axis axis) const = 0;
};

struct DeviceTrainerOptions {
  std::int64_t micro_batch = 1, seq_len = 1;
  DType operands = DType::f32;                    // GEMM operands: f32, bf16 or f16 (training.precision)
  nn::Recompute recompute = nn::Recompute::none;  // training.recompute
  bool sequence_parallel = false;                 // parallel.sequence_parallel (with tp > 1)
  // Pipeline parallelism: the host model's split (its chunks of global layers, whether this rank
  // holds the first / last stage) and the schedule.
  std::vector<std::vector<int>> chunks;
  bool first_stage = true, last_stage = true;
  dist::ScheduleKind schedule = dist::ScheduleKind::one_f_one_b;
  int micro_batches = 1, virtual_stages = 1;
  // parallel.collective_timeout: a device collective or transfer not complete after this many
  // seconds aborts its NCCL communicator and throws naming op, group and rank (0 = wait forever).
  double collective_timeout = 0.0;
};

// `dp`: the host
// communicator of this rank's data-parallel group; with more than one rank the trainer builds an
// NcclCommunicator over the same ranks (the host one shares its unique id). `host`: the Engine's
// DataParallel over the host model — its ZeRO stage (0 or 1), bucket layout and optimizer
// segments are the device's, so the host optimizer's packed moments are the device's too. `tp`:
// the host communicator of the tensor-parallel group (size 1: none); with more ranks DeviceGpt
// holds this rank's shard (the host model's layout) and an NcclCommunicator over the group
// carries the activations' all-reduces. `pp`: the host communicator of the pipeline group (size 1:
// none); with more ranks the stage's activations and gradients go over NCCL between neighbours.
std::unique_ptr<DeviceTrainer> make_device_trainer(const nn::TransformerConfig& model,
                                                   const DeviceTrainerOptions& options, dist::Communicator& dp,
                                                   dist::Communicator& tp, dist::Communicator& pp,
                                                   const DataParallel& host);

}  // namespace myriad::train
