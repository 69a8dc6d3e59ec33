// Engine — one rank's training state and the step loop, data parallel over the dp group.
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
// collective over the dp group; checkpoints hold full (layout-independent) tensors, written by
// rank 0.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <spdlog/logger.h>

#include "myriad/config/run_config.h"
#include "myriad/data/sampler.h"
#include "myriad/data/token_shard.h"
#include "myriad/dist/process_groups.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/optim/adamw_optimizer.h"
#include "myriad/optim/lr_schedule.h"
#include "myriad/train/data_parallel.h"
#include "myriad/train/prepared_data.h"

namespace myriad::train {

struct StepMetrics {
  std::int64_t step = 0;        // optimizer steps completed after this one
  double loss = 0.0;            // mean loss over the valid tokens of the global batch
  float lr = 0.0f;
  double grad_norm = 0.0;       // before clipping
  bool skipped = false;         // non-finite gradients: update skipped
  std::int64_t tokens = 0;      // tokens of the global batch (all dp ranks)
  double seconds = 0.0;         // wall time of the step
  double comm_seconds = 0.0;    // time this rank waited on communication (not hidden by compute)
  std::int64_t comm_bytes = 0;  // bytes this rank sent during the step
};

struct MemoryReport {
  std::int64_t parameter_bytes = 0, gradient_bytes = 0, optimizer_bytes = 0;
  std::int64_t activation_bytes = 0;  // saved between forward and backward (one micro-batch)
  std::int64_t scratch_bytes = 0;     // shared buffers
  std::int64_t comm_buffer_bytes = 0;  // peak transient ZeRO buffers (gathered units, unit gradients)
};

nn::TransformerConfig transformer_config(const ModelConfig& model, std::int64_t vocab_size);

class Engine {
 public:
  // `groups` (not owned, must outlive the engine); nullptr = a world of one.
  Engine(const RunConfig& config, std::shared_ptr<spdlog::logger> log, dist::ProcessGroups* groups = nullptr);
  ~Engine();

  StepMetrics step();
  double evaluate();  // mean validation loss over training.eval_batches micro-batches
  std::string save();  // checkpoint at the current step into checkpoint.dir; returns its path
  void load(const std::string& checkpoint_dir);  // "auto" = newest in checkpoint.dir
  std::string generate(const std::string& prompt, std::int64_t max_new_tokens, float temperature,
                       std::int64_t top_k, std::uint64_t seed);

  std::int64_t step_count() const { return step_; }
  const RunConfig& config() const { return config_; }
  nn::GptModel& model() { return *model_; }
  optim::AdamWOptimizer& optimizer() { return data_parallel_->optimizer(); }
  DataParallel& data_parallel() { return *data_parallel_; }
  dist::ProcessGroups& groups() { return *groups_; }
  const data::BpeTokenizer* tokenizer() const { return data_.tokenizer.get(); }
  MemoryReport memory_report() const;
  std::int64_t tokens_per_step() const;
  double flops_per_token() const;  // GptModel::flops_per_token at training.seq_len

 private:
  void check_supported_layout() const;
  dist::Communicator& dp() { return groups_->group(dist::Axis::dp); }

  RunConfig config_;
  std::shared_ptr<spdlog::logger> log_;
  std::unique_ptr<dist::ProcessGroups> owned_groups_;
  dist::ProcessGroups* groups_ = nullptr;
  PreparedData data_;
  std::unique_ptr<data::ShardSet> train_shards_, val_shards_;
  std::unique_ptr<data::TrainSampler> train_sampler_;
  std::unique_ptr<data::EvalSampler> eval_sampler_;
  std::unique_ptr<nn::GptModel> model_;
  std::unique_ptr<DataParallel> data_parallel_;
  optim::LrSchedule schedule_;
  nn::Recompute recompute_ = nn::Recompute::none;
  std::int64_t step_ = 0;
  std::vector<Tensor> micro_ids_, micro_targets_;
};

}  // namespace myriad::train
