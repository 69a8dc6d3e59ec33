// Mixture planning: open each source, draw the run's samples with MixtureSampler (see
// mixture_plan.h).
#include "myriad/data/mixture_plan.h"

#include <memory>
#include <sstream>

#include "myriad/core/error.h"
#include "myriad/data/mixture_sampler.h"

namespace myriad::data {

MixturePlan plan_mixture(const std::vector<std::string>& paths, const std::vector<double>& weights, std::int64_t steps,
                         std::int64_t samples_per_step, std::int64_t seq_len, std::uint64_t seed,
                         const AtRest& at_rest) {
  MYRIAD_CHECK(!paths.empty() && paths.size() == weights.size(),
               "a mixture needs at least one source and one weight per source");
  MYRIAD_CHECK(steps >= 0 && samples_per_step > 0 && seq_len > 0, "steps (" << steps << "), samples per step ("
                                                                            << samples_per_step << ") and seq_len ("
                                                                            << seq_len << ") must be positive");
  MixturePlan plan;
  std::vector<std::unique_ptr<ShardSet>> streams;
  std::vector<const ShardSet*> pointers;
  for (std::size_t k = 0; k < paths.size(); ++k) {
    try {
      streams.push_back(std::make_unique<ShardSet>(ShardSet::open_split(paths[k], "train", true, at_rest)));
    } catch (const Error& e) {
      MYRIAD_THROW("source " << k << " ('" << paths[k] << "'): " << e.message());
    }
    pointers.push_back(streams.back().get());
    MYRIAD_CHECK(k == 0 || streams[k]->vocab_size() == plan.vocab_size,
                 "source " << k << " ('" << paths[k] << "') has a vocabulary of " << streams[k]->vocab_size()
                           << " tokens, source 0 one of " << plan.vocab_size << ": a mixture needs one tokenizer");
    plan.vocab_size = streams[0]->vocab_size();
    plan.sources.push_back({paths[k], weights[k], streams[k]->size(), 0, 0.0, 0.0});
  }
  const MixtureSampler sampler(pointers, weights, seq_len, seed);
  const std::int64_t samples = steps * samples_per_step;
  plan.run_tokens = samples * seq_len;
  plan.exact = samples <= kExactSamples;
  double total_weight = 0.0;
  for (double w : weights) total_weight += w;
  if (plan.exact) {
    for (std::int64_t step = 0; step < steps; ++step) {
      for (std::int64_t j = 0; j < samples_per_step; ++j)
        plan.sources[sampler.source_of(step, j)].drawn_tokens += seq_len;
    }
  } else {
    for (MixtureSourcePlan& source : plan.sources) {
      source.drawn_tokens =
          static_cast<std::int64_t>(static_cast<double>(plan.run_tokens) * source.weight / total_weight);
    }
  }
  std::ostringstream yaml;
  yaml << "data:\n  sources:\n";
  for (MixtureSourcePlan& source : plan.sources) {
    source.share =
        plan.run_tokens > 0 ? static_cast<double>(source.drawn_tokens) / static_cast<double>(plan.run_tokens) : 0.0;
    source.epochs = static_cast<double>(source.drawn_tokens) / static_cast<double>(source.stream_tokens);
    yaml << "    - {path: " << source.path << ", weight: " << source.weight << "}\n";
  }
  plan.yaml = yaml.str();
  return plan;
}

}  // namespace myriad::data
