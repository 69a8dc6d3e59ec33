// MixtureSampler — training windows drawn from several token streams (data.sources) in given
// proportions, deterministically from (seed, step, global sample index) like TrainSampler:
//   source k of sample j at step s: the first k with u < (w_0 + ... + w_k) / (w_0 + ... + w_{K-1}),
//     u = the 64-bit word of philox4x32(seed ^ kMixtureKeyTag, s, j) / 2^64;
//   its window: source k's own TrainSampler window for (s, j) (sampler.h).
// So a data-parallel rank filling samples [r*b, (r+1)*b) gets exactly its rows of the serial
// batch, and a resumed or resharded run sees exactly the data it would have seen. Each source
// must hold at least seq_len + 1 tokens. fill_batch also counts the target tokens each source
// contributed (T per sample), for the per-source metrics. The ShardSets must outlive the sampler.
#pragma once

#include <cstdint>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/data/sampler.h"
#include "myriad/data/token_shard.h"

namespace myriad::data {

inline constexpr std::uint64_t kMixtureKeyTag = 0x4D49585455524531ull;

class MixtureSampler {
 public:
  // weights: one per source, each > 0 (normalised here). Throws naming the source that is too
  // short or the weight that is not positive.
  MixtureSampler(const std::vector<const ShardSet*>& sources, const std::vector<double>& weights, std::int64_t seq_len,
                 std::uint64_t seed);

  std::size_t source_count() const { return samplers_.size(); }
  // Which source sample `sample` of `step` comes from.
  std::size_t source_of(std::int64_t step, std::int64_t sample) const;
  // As TrainSampler::fill_batch; adds T to tokens_by_source[k] for every sample from source k
  // (resized to source_count() when shorter).
  void fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count, Tensor& inputs, Tensor& targets,
                  std::vector<std::int64_t>* tokens_by_source = nullptr) const;

 private:
  std::vector<const ShardSet*> sources_;
  std::vector<TrainSampler> samplers_;
  std::vector<double> cumulative_;  // normalised, last = 1
  std::int64_t seq_len_;
  std::uint64_t seed_;
};

}  // namespace myriad::data
