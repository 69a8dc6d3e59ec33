// Train / eval samplers: window starts from Philox (train) or consecutive (eval), copied out of
// the memory-mapped shards into (count, T) i32 tensors, one row per OpenMP iteration.
#include "myriad/data/sampler.h"

#include "myriad/core/error.h"
#include "myriad/core/philox.h"

namespace myriad::data {

namespace {

void check_too_short(const char* who, const ShardSet& shards, std::int64_t seq_len) {
  MYRIAD_CHECK(seq_len > 0, who << ": seq_len must be positive, got " << seq_len);
  MYRIAD_CHECK(shards.size() >= seq_len + 1, who << ": token stream too short for seq_len " << seq_len
                                                 << ": a window needs " << seq_len + 1 << " tokens, the stream has "
                                                 << shards.size() << " (" << shards.describe() << ")");
}

void check_batch_tensor(const char* who, const char* name, const Tensor& t, std::int64_t count, std::int64_t seq_len) {
  MYRIAD_CHECK(t.defined(), who << ": " << name << " is undefined; expected i32[" << count << ", " << seq_len << "]");
  MYRIAD_CHECK(
      t.device().is_cpu() && t.dtype() == DType::i32 && t.shape() == Shape({count, seq_len}) && t.is_contiguous(),
      who << ": " << name << " must be a contiguous i32[" << count << ", " << seq_len << "] cpu tensor, got "
          << t.describe());
}

// Rows j in [0, count) get stream[start(j), start(j) + T) and stream[start(j) + 1, start(j) + T + 1).
template <typename Start>
void fill_windows(const ShardSet& shards, std::int64_t count, std::int64_t seq_len, Start start, Tensor& inputs,
                  Tensor& targets) {
  std::int32_t* in = inputs.data<std::int32_t>();
  std::int32_t* tg = targets.data<std::int32_t>();
#pragma omp parallel for schedule(static) if (count * seq_len > 16384)
  for (std::int64_t j = 0; j < count; ++j) {
    std::int64_t offset = start(j);
    shards.read(offset, seq_len, in + j * seq_len);
    shards.read(offset + 1, seq_len, tg + j * seq_len);
  }
}

}  // namespace

TrainSampler::TrainSampler(const ShardSet& shards, std::int64_t seq_len, std::uint64_t seed)
    : shards_(&shards), seq_len_(seq_len), seed_(seed) {
  check_too_short("TrainSampler", shards, seq_len);
  valid_starts_ = shards.size() - seq_len;
}

std::int64_t TrainSampler::window_start(std::int64_t step, std::int64_t sample) const {
  MYRIAD_CHECK(step >= 0 && sample >= 0,
               "TrainSampler: step " << step << " and sample " << sample << " must be non-negative");
  auto words =
      philox4x32(seed_ ^ kTrainSamplerKeyTag, static_cast<std::uint64_t>(step), static_cast<std::uint64_t>(sample));
  std::uint64_t u = static_cast<std::uint64_t>(words[1]) << 32 | words[0];
  // floor(u * n / 2^64): uniform over [0, n) up to a relative bias below n / 2^64.
  auto n = static_cast<unsigned __int128>(valid_starts_);
  return static_cast<std::int64_t>((static_cast<unsigned __int128>(u) * n) >> 64);
}

void TrainSampler::fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count, Tensor& inputs,
                              Tensor& targets) {
  MYRIAD_CHECK(step >= 0 && first_sample >= 0 && count >= 0, "TrainSampler::fill_batch: step "
                                                                 << step << ", first_sample " << first_sample
                                                                 << " and count " << count << " must be non-negative");
  check_batch_tensor("TrainSampler::fill_batch", "inputs", inputs, count, seq_len_);
  check_batch_tensor("TrainSampler::fill_batch", "targets", targets, count, seq_len_);
  fill_windows(
      *shards_, count, seq_len_, [&](std::int64_t j) { return window_start(step, first_sample + j); }, inputs, targets);
}

EvalSampler::EvalSampler(const ShardSet& shards, std::int64_t seq_len) : shards_(&shards), seq_len_(seq_len) {
  check_too_short("EvalSampler", shards, seq_len);
  num_windows_ = (shards.size() - 1) / seq_len;
}

void EvalSampler::fill_batch(std::int64_t first_window, std::int64_t count, Tensor& inputs, Tensor& targets) {
  MYRIAD_CHECK(first_window >= 0 && count >= 0 && first_window <= num_windows_ - count,
               "EvalSampler::fill_batch: windows [" << first_window << ", " << first_window + count << ") outside [0, "
                                                    << num_windows_ << ")");
  check_batch_tensor("EvalSampler::fill_batch", "inputs", inputs, count, seq_len_);
  check_batch_tensor("EvalSampler::fill_batch", "targets", targets, count, seq_len_);
  const std::int64_t seq_len = seq_len_;
  fill_windows(
      *shards_, count, seq_len_, [&](std::int64_t j) { return (first_window + j) * seq_len; }, inputs, targets);
}

}  // namespace myriad::data
