// Mixture planning (`myriad-data mix`) — what a data.sources mixture gives a run before it starts:
// each source's train stream checked (shards readable, one vocabulary, at least one window), and
// the tokens the run will draw from each source, its share and how many times it passes over the
// source's stream (epochs). The draws are MixtureSampler's own for (seed, step, sample): counted
// exactly for up to kExactSamples samples, beyond that the weights' expectation.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "myriad/data/at_rest.h"

namespace myriad::data {

struct MixtureSourcePlan {
  std::string path;  // a folder of token shards (its train split)
  double weight = 1.0;
  std::int64_t stream_tokens = 0;  // tokens in the source's train split
  std::int64_t drawn_tokens = 0;   // target tokens the run draws from it
  double share = 0.0;              // drawn / all drawn
  double epochs = 0.0;             // drawn / stream_tokens
};

struct MixturePlan {
  std::vector<MixtureSourcePlan> sources;
  std::uint32_t vocab_size = 0;
  std::int64_t run_tokens = 0;  // steps x samples_per_step x seq_len
  bool exact = true;            // counted sample by sample
  std::string yaml;             // the data.sources block for a config
};

inline constexpr std::int64_t kExactSamples = 50'000'000;

MixturePlan plan_mixture(const std::vector<std::string>& paths, const std::vector<double>& weights, std::int64_t steps,
                         std::int64_t samples_per_step, std::int64_t seq_len, std::uint64_t seed,
                         const AtRest& at_rest = {});

}  // namespace myriad::data
