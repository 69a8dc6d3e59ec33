// Engine — one rank's training state and the step loop over the 3D layout (dp x tp x pp).
//
// Built from a resolved RunConfig and the ProcessGroups of the job (a world of one when none is
// given): rank 0 prepares the data while the others wait (a failure there fails every rank),
// builds the model (GPT-2 or LLaMA style) with parameters initialised from training.seed, the
// DataParallel layer (gradient buckets, ZeRO stage, sharded AdamW), the LR schedule and the
// samplers. step() runs one optimizer step over the global batch: dp rank r runs micro-batch m on
// global samples [(m*dp + r)*B, (m*dp + r + 1)*B) of the serial batch, the loss is normalised by
// the valid tokens of the whole global batch (summed over dp), gradients are reduced in buckets
// during the last backward, clipped by the global norm and applied. Batch of step s = f(seed, s),
// so a resumed run continues bit-identically. evaluate(), save(), load() and generate() are
// collective; checkpoints are sharded (checkpoint.h): each part of the state is written by one
// rank, with its global slices in the manifest, so they load under any layout.
// Tensor parallel: the model holds this tp rank's share (model_split.h); the tp ranks of a dp
// replica see the same batch. Pipeline parallel: the ranks of a pipeline run the schedule of
// parallel.pp_schedule over the step's micro-batches (PipelineExecutor); the tied embedding's
// gradients are summed between the first and last stage, then gradients are reduced over dp
// (ZeRO 0/1) and the clipping norm is summed over dp, tp and pp with each parameter counted once.
// Checkpoints and generation go through the serial layout (SerialLayout).
//
// A facade over separate parts. The constructor is the composition root: it builds the RankState
// the parts share (the groups, the model under its shard plan, DataParallel, precision, the step
// counter) and the parts — StepData (data preparation, samplers, prefetch: data/step_data.h), the
// Trainer (step, evaluate, the update: trainer.h), the ResearchStep (the step in parts:
// research_step.h), the Checkpointer (checkpoint/checkpointer.h) and the InferenceSession
// (logits, generation, INT8 serving: inference_session.h). The Engine forwards its public calls
// and owns the cross-part rules (a run folder's fresh-run check before training, training
// refused while INT8 weights are served). No part reaches into another's members.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <spdlog/logger.h>

#include "myriad/nn/generate.h"
#include "myriad/ops/meta_backend.h"
#include "myriad/optim/lr_schedule.h"
#include "myriad/train/dry_run.h"
#include "myriad/train/metrics/memory_report.h"
#include "myriad/train/metrics/peak_flops.h"
#include "myriad/train/metrics/step_metrics.h"
#include "myriad/train/rank_state.h"
#include "myriad/train/owned_slice.h"

namespace myriad::distributed {
class CollectiveWatchdog;
}
namespace myriad::data {
class BpeTokenizer;
}

namespace myriad::train {

class Checkpointer;
class CpuGemmTuning;
class InferenceSession;
class ResearchStep;
class StepData;
class Trainer;
class MicroBatchGraph;

class Engine {
 public:
  // `groups` (not owned, must outlive the engine); nullptr = a world of one.
  Engine(const RunConfig& config, std::shared_ptr<spdlog::logger> log, distributed::ProcessGroups* groups = nullptr);
  ~Engine();
  // Builds rank `rank`'s part of the config's layout for a job of `world_size` ranks on the meta
  // device and reports the memory it would hold (dry_run.h). One process, no data, no MPI.
  static DryRunReport dry_run(const RunConfig& config, int world_size, int rank);

  StepMetrics step();
  double evaluate();  // mean validation loss over training.eval_batches micro-batches
  // Checkpoint at the current step into checkpoint.dir; returns its path. Collective. With
  // `background`, rank 0 writes a host snapshot in a thread while training continues (the
  // checkpoint appears when complete); wait_for_save() waits for it (and rethrows its error).
  std::string save(bool background = false);
  std::string wait_for_save();
  void load(const std::string& checkpoint_dir);  // "auto" = newest in checkpoint.dir
  std::string generate(const std::string& prompt, std::int64_t max_new_tokens, float temperature, std::int64_t top_k,
                       std::uint64_t seed);
  // Token ids in, ids and log-probabilities out (InferenceSession). Collective; every rank
  // returns the same result.
  nn::Generation generate_ids(const std::vector<std::int32_t>& prompt, const nn::GenerateArgs& args);

  // Serves a weight-only INT8 export (InferenceSession; `myriad-convert export --format int8`):
  // its int8 weights (linear layers, MoE experts, the token embedding) attach to the model
  // (GptModel::attach_int8) and its other tensors become the parameter values; the f32 copies
  // of the int8 weights, the gradients and the optimizer moments are freed. evaluate(),
  // evaluate_on(), forward_logits() and generate() then compute from them, and every training
  // call, save and load are refused. Whole-model layouts only (tp, pp, cp, ep 1; ZeRO < 3),
  // training.precision fp32. Collective; a bad file fails on every rank before anything changes.
  void load_int8(const std::string& path);
  bool serves_int8() const;

  // ---- Research API (ResearchStep, research_step.h; docs/python.md): a step in parts, on the caller's batches.
  // Every call is collective over the job. Each rank passes its data-parallel replica's rows: the
  // tp, pp and cp ranks of one replica pass the same rows (checked), the dp ranks their own part
  // of the global batch (train_batch() gives the rows step() would take). ids / targets are
  // (rows, training.seq_len) i32 with rows a positive multiple of training.micro_batch, split
  // into micro-batches of that size; a target of nn::GptModel::kIgnoreIndex is not counted.
  //
  // forward: the mean loss over the valid targets of the global batch (every replica's rows);
  // the batch is kept for backward().
  double forward(const Tensor& ids, const Tensor& targets);
  // The mean loss over the valid targets of the caller's rows (every replica's), (rows, T) with any
  // rows >= 1 and T <= model.context_length (run in chunks of training.micro_batch rows).
  double evaluate_on(const Tensor& ids, const Tensor& targets);
  // Logits (rows, T, model.vocab_size) of ids (rows, T <= model.context_length) on every rank, from
  // the serial model's values (assembled from every rank's part under tp / pp / ep).
  Tensor forward_logits(const Tensor& ids);
  // Accumulates the gradients of `scale` x the last forward()'s loss: the batch runs through the
  // rank's schedule again, forward with activations kept then backward (the pipeline schedule
  // needs both passes in one run). `sync` false keeps the data-parallel reduction for a later
  // backward (accumulation over calls); a backward after a synchronised one needs zero_grad() or
  // optimizer_step() first.
  void backward(double scale = 1.0, bool sync = true);
  void zero_grad();
  // The update from the reduced gradients at `lr` (nullopt = the schedule's at step_count()):
  // clipping, the loss scaler and the non-finite checks as in step(); advances step_count().
  // Returns the step's metrics (loss of the forward()s since the last update).
  StepMetrics optimizer_step(std::optional<double> lr = std::nullopt);
  // The rows of step `step`'s global batch this rank trains on (whole sequences under cp):
  // (gradient_accumulation * micro_batch, seq_len) ids and targets, micro-batch after micro-batch.
  std::pair<Tensor, Tensor> train_batch(std::int64_t step);
  const optim::LrSchedule& schedule() const;
  void set_schedule(const optim::LrSchedule& schedule);
  // Called in every optimizer step (step() and optimizer_step()) once the gradients are reduced,
  // before clipping and the update; nullptr = none.
  void set_before_update(std::function<void()> hook);
  // This rank's owned part of each parameter (owned_slice.h).
  using OwnedSlice = train::OwnedSlice;
  std::vector<OwnedSlice> owned_slices();

  std::int64_t step_count() const { return state_.step; }
  const RunConfig& config() const { return state_.config; }
  // The model (with training.device cuda its tensors live on the GPU: ops::Placement::to_host).
  nn::GptModel& model() { return *state_.model; }
  bool trains_on_device() const { return state_.device != nullptr; }
  optim::AdamWOptimizer& optimizer() { return state_.data_parallel->optimizer(); }
  parallel::DataParallel& data_parallel() { return *state_.data_parallel; }
  distributed::ProcessGroups& groups() { return *state_.groups; }
  const data::BpeTokenizer* tokenizer() const;
  // Memory per rank by role (where the training state lives: host or GPU).
  MemoryReport memory_report() const;
  std::int64_t tokens_per_step() const;
  double flops_per_token() const;  // GptModel::flops_per_token at training.seq_len
  const PeakFlops& peak_flops() const;
  std::string metrics_path() const;
  // training.cuda_graphs: the step's micro-batch graph (nullptr when graphs are off for this run).
  const MicroBatchGraph* micro_batch_graph() const;
  // Testing aid: sleep this long inside every step's compute phase (a simulated slow rank).
  void set_compute_delay_for_testing(double seconds);

 private:
  // The dry run's engine: the groups of one rank of a world that does not exist, its model on `meta`.
  Engine(const RunConfig& config, distributed::ProcessGroups& groups, ops::MetaBackend& meta);
  void log_model();
  void log_layout();

  std::unique_ptr<distributed::ProcessGroups> owned_groups_;  // a world of one when none was given
  // The composition root's product: config, log, groups, device, model, DataParallel, precision,
  // step. Every part below refers to it and is destroyed before it.
  RankState state_;
  std::unique_ptr<StepData> data_;                             // tokens: preparation, samplers, prefetch
  std::unique_ptr<CpuGemmTuning> cpu_gemm_;                    // training.cpu_gemm: the run's GEMM plan
  std::unique_ptr<Trainer> trainer_;                           // step, evaluate, the update
  std::unique_ptr<ResearchStep> research_;                     // the step in parts (research API)
  std::unique_ptr<Checkpointer> checkpointer_;                 // save, load, the fresh-run check (not in a dry run)
  std::unique_ptr<InferenceSession> inference_;                // logits, generation, INT8 (not in a dry run)
  std::unique_ptr<distributed::CollectiveWatchdog> watchdog_;  // last: stops before anything it watches
};

}  // namespace myriad::train
