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
// Parts: the constructor is the composition root — it builds the RankState the parts share (the
// groups, the model, DataParallel, precision, the step counter); checkpoints are the
// Checkpointer's (checkpoint/checkpointer.h), logits, generation and INT8 serving the
// InferenceSession's (inference_session.h); the Engine forwards its public calls to them.
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include <spdlog/logger.h>

#include "myriad/config/run_config.h"
#include "myriad/data/mixture_sampler.h"
#include "myriad/data/sampler.h"
#include "myriad/data/token_shard.h"
#include "myriad/distributed/process_groups.h"
#include "myriad/nn/generate.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/optim/adamw_optimizer.h"
#include "myriad/optim/lr_schedule.h"
#include "myriad/ops/meta_backend.h"
#include "myriad/train/data/batch_prefetch.h"
#include "myriad/train/config_wiring.h"
#include "myriad/parallel/data_parallel.h"
#include "myriad/train/dry_run.h"
#include "myriad/train/metrics/memory_report.h"
#include "myriad/train/metrics/metrics_writer.h"
#include "myriad/train/metrics/peak_flops.h"
#include "myriad/parallel/pipeline_executor.h"
#include "myriad/train/rank_state.h"
#include "myriad/train/metrics/step_metrics.h"
#include "myriad/train/metrics/step_metrics_collector.h"
#include "myriad/train/metrics/straggler_detector.h"
#include "myriad/train/data/prepared_data.h"

namespace myriad::train {

class Checkpointer;
class InferenceSession;

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
  // its int8 linear weights attach to the model (GptModel::attach_int8) and its other tensors
  // become the parameter values; evaluate(), evaluate_on(), forward_logits() and generate() then
  // compute from them, and every training call is refused. Whole-model layouts only (tp, pp, cp,
  // ep 1; ZeRO < 3), training.precision fp32. Collective; a bad file fails on every rank before
  // anything changes.
  void load_int8(const std::string& path);
  bool serves_int8() const;

  // ---- Research API (engine_research.cpp; docs/python.md): a step in parts, on the caller's batches.
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
  const optim::LrSchedule& schedule() const { return schedule_; }
  void set_schedule(const optim::LrSchedule& schedule);
  // Called in every optimizer step (step() and optimizer_step()) once the gradients are reduced,
  // before clipping and the update; nullptr = none.
  void set_before_update(std::function<void()> hook) { before_update_ = std::move(hook); }
  // This rank's owned part of each parameter (its ZeRO shard; whole parameters at ZeRO 0): views
  // of the values, reduced gradients and AdamW moments, flat, from element `start` of the parameter.
  struct OwnedSlice {
    std::string name;
    std::vector<std::int64_t> shape;  // the whole parameter's
    std::int64_t start = 0;
    Tensor value, grad, m, v;
  };
  std::vector<OwnedSlice> owned_slices();

  std::int64_t step_count() const { return state_.step; }
  const RunConfig& config() const { return state_.config; }
  // The model (with training.device cuda its tensors live on the GPU: ops::Placement::to_host).
  nn::GptModel& model() { return *state_.model; }
  bool trains_on_device() const { return state_.device != nullptr; }
  optim::AdamWOptimizer& optimizer() { return state_.data_parallel->optimizer(); }
  parallel::DataParallel& data_parallel() { return *state_.data_parallel; }
  distributed::ProcessGroups& groups() { return *state_.groups; }
  const data::BpeTokenizer* tokenizer() const { return data_.tokenizer.get(); }
  // Memory per rank by role (where the training state lives: host or GPU).
  MemoryReport memory_report() const;
  std::int64_t tokens_per_step() const;
  double flops_per_token() const { return flops_per_token_; }  // GptModel::flops_per_token at training.seq_len
  const PeakFlops& peak_flops() const { return metrics_->peak(); }
  std::string metrics_path() const { return metrics_->metrics_path(); }
  // Testing aid: sleep this long inside every step's compute phase (a simulated slow rank).
  void set_compute_delay_for_testing(double seconds) { compute_delay_ = seconds; }

 private:
  // The dry run's engine: the groups of one rank of a world that does not exist, its model on `meta`.
  Engine(const RunConfig& config, distributed::ProcessGroups& groups, ops::MetaBackend& meta);
  void log_layout();
  // The rank's model on `placement` (initialised from training.seed unless `meta` is given: a dry
  // run's backend, whose allocations are labelled by phase), DataParallel, the compute copy of the
  // weights, the loss scaler and the step's executor.
  void build_rank_model(ops::Placement placement, ops::MetaBackend* meta);
  void setup_precision();    // training.precision: the compute copy of the weights
  void setup_loss_scaler();  // fp16
  // The groups of RankState (host, or the device's under training.device cuda).
  distributed::Communicator& group(distributed::Axis axis) { return state_.group(axis); }
  distributed::Communicator& dp() { return state_.dp(); }
  distributed::Communicator& data_group() { return state_.data_group(); }
  distributed::Communicator& tp() { return state_.tp(); }
  distributed::Communicator& pp() { return state_.pp(); }
  bool model_parallel() const { return state_.model_parallel(); }
  nn::LossSum forward_loss(const Tensor& ids, const Tensor& targets);
  // The step's micro-batches (this rank's rows of each) from the sampler.
  void fill_micro_batches(std::int64_t step, std::vector<Tensor>& ids, std::vector<Tensor>& targets);
  // After a backward pass through the schedule: sync = the tied embedding's halves summed and the
  // gradients reduced over dp (finish_step), else only the reductions in flight retired.
  void finish_backward_pass(bool sync);
  // The before-update hook, clipping and the update at lr, the loss scaler, the compute copy; the step counter + 1.
  optim::OptimizerStepStats apply_update(float lr, double loss_scale);
  // training.max_nonfinite_steps: throws when too many steps in a row were not finite.
  void check_finite_progress(const StepMetrics& metrics, double loss_scale);
  // A PipelineExecutor of this rank's schedule over `micro_batches`, wired to DataParallel.
  std::unique_ptr<parallel::PipelineExecutor> make_executor(int micro_batches);
  // The executor for `micro_batches` micro-batches (the step's is pipeline_).
  parallel::PipelineExecutor& executor_for(int micro_batches);
  // Tokens inside the vocabulary, targets too or the ignore index; the same rows on every tp, pp
  // and cp rank of a replica (a collective check). `what` names the call in errors.
  void check_caller_rows(const char* what, const Tensor& host_ids, const Tensor& host_targets);
  // The caller's rows as micro-batches (cp: this rank's chunks), checked.
  void split_caller_batch(const Tensor& ids, const Tensor& targets, std::vector<Tensor>& micro_ids,
                          std::vector<Tensor>& micro_targets);
  void sync_tied_embedding();
  // local (B, T / cp) <- this rank's two chunks of every sequence of `whole` (B, T).
  void context_rows(const Tensor& whole, Tensor& local) const;

  std::unique_ptr<distributed::ProcessGroups> owned_groups_;  // a world of one when none was given
  PreparedData data_;
  std::unique_ptr<data::ShardSet> train_shards_, val_shards_;
  std::unique_ptr<data::TrainSampler> train_sampler_;           // one corpus
  std::vector<std::unique_ptr<data::ShardSet>> source_shards_;  // data.sources: each source's train stream
  std::unique_ptr<data::MixtureSampler> mixture_sampler_;       // data.sources
  std::unique_ptr<data::EvalSampler> eval_sampler_;
  // The composition root's product: config, log, groups, device, model, DataParallel, precision,
  // step. Everything below refers to it and is destroyed before it.
  RankState state_;
  std::vector<Tensor> batch_ids_, batch_targets_;         // cp > 1: the replica's whole sequences
  std::unique_ptr<parallel::PipelineExecutor> pipeline_;  // the step loop: this rank's schedule (one stage at pp 1)
  std::map<int, std::unique_ptr<parallel::PipelineExecutor>> research_executors_;  // other micro-batch counts
  bool sync_backward_ = true;  // the observers' data-parallel reduction (backward(sync))
  // Research API state: the last forward()'s micro-batches and global valid targets; whether the
  // gradients were reduced already; the loss sum / tokens of forward()s since the last update.
  std::vector<Tensor> research_ids_, research_targets_;
  std::int64_t research_valid_ = 0;
  bool research_reduced_ = false;
  double research_loss_sum_ = 0.0;
  std::int64_t research_loss_tokens_ = 0;
  std::function<void()> before_update_;
  double bubble_seconds_ = 0.0;  // of the last step
  Tensor peer_embedding_grad_;   // pp > 1, tied: the other end's embedding gradient
  optim::LrSchedule schedule_;
  Recompute recompute_ = Recompute::none;
  double flops_per_token_ = 0.0;
  nn::ActivationMemory activations_;
  int nonfinite_steps_in_a_row_ = 0;  // training.max_nonfinite_steps counts these
  std::vector<Tensor> micro_ids_, micro_targets_;
  std::unique_ptr<BatchPrefetch> prefetch_;        // reads step + 1's batches while step computes
  std::unique_ptr<StepMetricsCollector> metrics_;  // comm, throughput, memory, stragglers, metrics files
  std::unique_ptr<Checkpointer> checkpointer_;     // save, load, the fresh-run check (not in a dry run)
  std::unique_ptr<InferenceSession> inference_;    // logits, generation, INT8 (not in a dry run)
  double compute_delay_ = 0.0;
  std::unique_ptr<distributed::CollectiveWatchdog> watchdog_;  // last: stops before anything it watches
};

}  // namespace myriad::train
