// MixtureSampler: the source of each sample from Philox and the weights, its window from the
// source's TrainSampler (see mixture_sampler.h).
#include "myriad/data/mixture_sampler.h"

#include "myriad/core/error.h"
#include "myriad/core/philox.h"

namespace myriad::data {

MixtureSampler::MixtureSampler(const std::vector<const ShardSet*>& sources, const std::vector<double>& weights,
                               std::int64_t seq_len, std::uint64_t seed)
    : sources_(sources), seq_len_(seq_len), seed_(seed) {
  MYRIAD_CHECK(!sources.empty() && sources.size() == weights.size(),
               "MixtureSampler: " << sources.size() << " sources and " << weights.size() << " weights");
  double total = 0.0;
  for (std::size_t k = 0; k < weights.size(); ++k) {
    MYRIAD_CHECK(weights[k] > 0.0, "MixtureSampler: source " << k << " has weight " << weights[k] << "; must be > 0");
    total += weights[k];
  }
  double running = 0.0;
  for (std::size_t k = 0; k < sources.size(); ++k) {
    try {
      samplers_.emplace_back(*sources[k], seq_len, seed);
    } catch (const Error& e) {
      MYRIAD_THROW("data source " << k << ": " << e.message());
    }
    running += weights[k];
    cumulative_.push_back(k + 1 == sources.size() ? 1.0 : running / total);
  }
}

std::size_t MixtureSampler::source_of(std::int64_t step, std::int64_t sample) const {
  const auto words =
      philox4x32(seed_ ^ kMixtureKeyTag, static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(sample));
  const std::uint64_t bits = static_cast<std::uint64_t>(words[1]) << 32 | words[0];
  const double u = static_cast<double>(bits >> 11) * 0x1.0p-53;  // [0, 1)
  std::size_t k = 0;
  while (k + 1 < cumulative_.size() && u >= cumulative_[k]) ++k;
  return k;
}

void MixtureSampler::fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count, Tensor& inputs,
                                Tensor& targets, std::vector<std::int64_t>* tokens_by_source) const {
  MYRIAD_CHECK(step >= 0 && first_sample >= 0 && count >= 0, "MixtureSampler::fill_batch: step "
                                                                 << step << ", first_sample " << first_sample
                                                                 << " and count " << count << " must be non-negative");
  MYRIAD_CHECK(inputs.dtype() == DType::i32 && targets.dtype() == DType::i32 && inputs.is_contiguous() &&
                   targets.is_contiguous() && inputs.shape() == Shape({count, seq_len_}) &&
                   targets.shape() == inputs.shape(),
               "MixtureSampler::fill_batch: inputs and targets must be contiguous i32["
                   << count << ", " << seq_len_ << "], got " << inputs.describe() << " and " << targets.describe());
  if (tokens_by_source && tokens_by_source->size() < samplers_.size()) tokens_by_source->resize(samplers_.size(), 0);
  std::int32_t* in = inputs.data<std::int32_t>();
  std::int32_t* tg = targets.data<std::int32_t>();
  for (std::int64_t j = 0; j < count; ++j) {
    const std::size_t k = source_of(step, first_sample + j);
    const std::int64_t offset = samplers_[k].window_start(step, first_sample + j);
    sources_[k]->read(offset, seq_len_, in + j * seq_len_);
    sources_[k]->read(offset + 1, seq_len_, tg + j * seq_len_);
    if (tokens_by_source) (*tokens_by_source)[k] += seq_len_;
  }
}

}  // namespace myriad::data
