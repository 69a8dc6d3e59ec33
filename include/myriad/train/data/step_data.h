// StepData — where a rank's training and validation tokens come from: the prepared data (rank 0
// tokenizes or validates the cache first, the others then take it), the shard sets, the sampler
// (one corpus, or data.sources mixed per sample), the evaluation sampler, and the step's
// micro-batch buffers filled ahead by a BatchPrefetch.
//
// Invariants: the batch of step s is a pure function of (training.seed, s), so a resumed run
// reads exactly the batches it would have read; micro-batch m of dp rank r holds global samples
// [(m dp + r) B, (m dp + r + 1) B). Under context parallelism the buffers hold whole sequences and
// take() hands out this rank's two chunks of each (nn::ContextParallel::take_chunks).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include <spdlog/logger.h>

#include "myriad/config/run_config.h"
#include "myriad/data/mixture_sampler.h"
#include "myriad/data/sampler.h"
#include "myriad/data/token_shard.h"
#include "myriad/distributed/communicator.h"
#include "myriad/nn/context_parallel.h"
#include "myriad/train/data/batch_prefetch.h"
#include "myriad/train/data/prepared_data.h"

namespace myriad::train {

class StepData {
 public:
  // Collective over `world` (data preparation on rank 0 first; its failure fails every rank).
  // `dp`: the replicas the global batch is dealt over; it outlives this. `at_rest`: the run's keys
  // (a resumed checkpoint's tokenizer may be encrypted).
  StepData(const RunConfig& config, spdlog::logger& log, distributed::Communicator& world,
           distributed::Communicator& dp, const data::AtRest& at_rest);

  // The step's micro-batches (this rank's rows; under cp its two chunks of each sequence) and the
  // seconds spent waiting for them.
  struct Batches {
    const std::vector<Tensor>& ids;
    const std::vector<Tensor>& targets;
    double wait_seconds;
  };
  Batches take(std::int64_t step, const nn::ContextParallel& cp);
  // The whole sequences of step `step`'s micro-batches into ids / targets (shaped (B, T) each).
  void fill(std::int64_t step, std::vector<Tensor>& ids, std::vector<Tensor>& targets) const;
  // data.sources: the tokens each source contributed to step `step`'s global batch of `samples`
  // sequences (empty with one corpus).
  std::vector<std::int64_t> tokens_by_source(std::int64_t step, std::int64_t samples) const;

  data::EvalSampler& eval_sampler() { return *eval_sampler_; }
  const data::BpeTokenizer* tokenizer() const { return prepared_.tokenizer.get(); }
  std::int64_t vocab_size() const { return prepared_.vocab_size; }

 private:
  const RunConfig& config_;
  distributed::Communicator& dp_;
  PreparedData prepared_;
  std::unique_ptr<data::ShardSet> train_shards_, val_shards_;
  std::unique_ptr<data::TrainSampler> train_sampler_;           // one corpus
  std::vector<std::unique_ptr<data::ShardSet>> source_shards_;  // data.sources: each source's train stream
  std::unique_ptr<data::MixtureSampler> mixture_sampler_;       // data.sources
  std::unique_ptr<data::EvalSampler> eval_sampler_;
  std::vector<Tensor> micro_ids_, micro_targets_;  // what the step computes on (local rows)
  std::vector<Tensor> batch_ids_, batch_targets_;  // cp > 1: the replica's whole sequences
  std::unique_ptr<BatchPrefetch> prefetch_;        // reads step + 1's batches while step computes
};

}  // namespace myriad::train
