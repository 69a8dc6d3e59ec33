// StepData: data preparation, samplers and the prefetched micro-batches of each step (step_data.h).
#include "myriad/train/data/step_data.h"

#include "myriad/core/error.h"
#include "myriad/distributed/scalar_reduce.h"

namespace myriad::train {

StepData::StepData(const RunConfig& config, spdlog::logger& log, distributed::Communicator& world,
                   distributed::Communicator& dp, const data::AtRest& at_rest)
    : config_(config), dp_(dp) {
  // Rank 0 tokenizes (or validates the cache); the others then find the cache complete.
  distributed::run_on_rank0(world, "data preparation",
                            [&] { prepared_ = prepare_data(config_, log, CacheUse::check_and_build, at_rest); });
  if (world.rank() != 0) prepared_ = prepare_data(config_, log, CacheUse::prepared_by_rank0, at_rest);
  MYRIAD_CHECK(config_.model.vocab_size >= prepared_.vocab_size,
               "model.vocab_size " << config_.model.vocab_size << " is smaller than the vocabulary of the data ("
                                   << prepared_.vocab_size << " in " << prepared_.shard_dir << ")");
  const std::int64_t T = config_.training.seq_len;
  if (prepared_.sources.empty()) {
    train_shards_ =
        std::make_unique<data::ShardSet>(data::ShardSet::open_split(prepared_.shard_dir, "train", true, at_rest));
    val_shards_ =
        std::make_unique<data::ShardSet>(data::ShardSet::open_split(prepared_.shard_dir, "val", true, at_rest));
    train_sampler_ = std::make_unique<data::TrainSampler>(*train_shards_, T, config_.training.seed);
  } else {
    // data.sources: one stream per source, mixed per sample; validation reads every source's val split.
    std::vector<const data::ShardSet*> streams;
    std::vector<double> weights;
    std::vector<std::string> val_paths;
    for (const PreparedSource& source : prepared_.sources) {
      source_shards_.push_back(
          std::make_unique<data::ShardSet>(data::ShardSet::open_split(source.shard_dir, "train", true, at_rest)));
      streams.push_back(source_shards_.back().get());
      weights.push_back(source.weight);
      for (const std::string& path : data::ShardSet::split_paths(source.shard_dir, "val")) val_paths.push_back(path);
    }
    val_shards_ = std::make_unique<data::ShardSet>(val_paths, true, at_rest);
    mixture_sampler_ = std::make_unique<data::MixtureSampler>(streams, weights, T, config_.training.seed);
  }
  // A corpus too small for one sequence: say which split and what to change, before the samplers do.
  const std::string where =
      config_.data.path.empty() ? std::string("the default corpus") : "'" + config_.data.path + "'";
  for (const auto& [split, shards] :
       {std::pair{"train", train_shards_.get()}, std::pair{"validation", val_shards_.get()}}) {
    if (shards == nullptr) continue;  // data.sources: each source's train stream is checked by its sampler
    MYRIAD_CHECK(shards->size() >= T + 1,
                 "data: the " << split << " split of " << where << " holds " << shards->size()
                              << " tokens, fewer than one sequence of training.seq_len + 1 = " << T + 1
                              << ": use a larger corpus, lower training.seq_len"
                              << (std::string(split) == "validation" ? ", or raise data.val_fraction" : ""));
  }
  eval_sampler_ = std::make_unique<data::EvalSampler>(*val_shards_, T);
  const std::int64_t B = config_.training.micro_batch, local_T = T / config_.parallel.cp;
  for (int i = 0; i < config_.training.gradient_accumulation; ++i) {
    micro_ids_.push_back(Tensor::empty({B, local_T}, DType::i32));
    micro_targets_.push_back(Tensor::empty({B, local_T}, DType::i32));
    if (config_.parallel.cp > 1) {
      batch_ids_.push_back(Tensor::empty({B, T}, DType::i32));
      batch_targets_.push_back(Tensor::empty({B, T}, DType::i32));
    }
  }
  auto read = [this](std::int64_t step, std::vector<Tensor>& ids, std::vector<Tensor>& targets) {
    fill(step, ids, targets);
  };
  prefetch_ = config_.parallel.cp > 1 ? std::make_unique<BatchPrefetch>(read, batch_ids_, batch_targets_)
                                      : std::make_unique<BatchPrefetch>(read, micro_ids_, micro_targets_);
}

StepData::Batches StepData::take(std::int64_t step, const nn::ContextParallel& cp) {
  if (config_.parallel.cp == 1) {
    const double wait = prefetch_->take(step, micro_ids_, micro_targets_);
    return {micro_ids_, micro_targets_, wait};
  }
  const double wait = prefetch_->take(step, batch_ids_, batch_targets_);
  for (std::size_t m = 0; m < micro_ids_.size(); ++m) {
    cp.take_chunks(batch_ids_[m], micro_ids_[m]);
    cp.take_chunks(batch_targets_[m], micro_targets_[m]);
  }
  return {micro_ids_, micro_targets_, wait};
}

void StepData::fill(std::int64_t step, std::vector<Tensor>& ids, std::vector<Tensor>& targets) const {
  const std::int64_t B = config_.training.micro_batch;
  const int ranks = dp_.size(), rank = dp_.rank();
  for (std::size_t m = 0; m < ids.size(); ++m) {
    const std::int64_t first = (static_cast<std::int64_t>(m) * ranks + rank) * B;
    if (mixture_sampler_) {
      mixture_sampler_->fill_batch(step, first, B, ids[m], targets[m]);
    } else {
      train_sampler_->fill_batch(step, first, B, ids[m], targets[m]);
    }
  }
}

std::vector<std::int64_t> StepData::tokens_by_source(std::int64_t step, std::int64_t samples) const {
  if (!mixture_sampler_) return {};  // every rank knows every sample's source (no communication)
  std::vector<std::int64_t> tokens(mixture_sampler_->source_count(), 0);
  for (std::int64_t j = 0; j < samples; ++j) tokens[mixture_sampler_->source_of(step, j)] += config_.training.seq_len;
  return tokens;
}

}  // namespace myriad::train
