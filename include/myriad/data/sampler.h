// Deterministic, resumable samplers over a ShardSet's token stream (N tokens, window T + 1).
//
// TrainSampler: sample j of a batch at step s is the window stream[o, o + T + 1) with
//   o = floor(u * (N - T)),  u = the 64-bit word (w1 << 32 | w0) of philox4x32(key, s, j_global) / 2^64,
//   key = seed ^ kTrainSamplerKeyTag,  j_global = first_sample + j,
// i.e. uniform over the N - T valid starts (multiply-shift; relative bias < (N - T) / 2^64).
// The offset depends on (seed, step, global sample index) only, so a data-parallel rank that
// fills samples [r*b, (r+1)*b) gets exactly its rows of the serial batch, however the batch is
// split across calls, threads or ranks; resuming at step s needs only s (the step is the data
// cursor). inputs[j, t] = stream[o + t], targets[j, t] = stream[o + t + 1] (next-token targets).
// Windows may cross shard boundaries: the stream is one concatenation of documents and eot
// tokens, and a window crossing documents is what GPT-style pre-training sees anyway.
//
// EvalSampler: window k is stream[k*T, k*T + T + 1) for k in [0, (N - 1) / T); consecutive,
// non-overlapping inputs that cover the val stream once, in a fixed order.
//
// Both keep a pointer to the ShardSet, which must outlive them and not be moved. Outputs are
// contiguous (count, T) i32 CPU tensors; fill_batch is safe to call concurrently (it only reads).
#pragma once

#include <cstdint>

#include "myriad/core/tensor.h"
#include "myriad/data/token_shard.h"

namespace myriad::data {

// Mixed into the seed so that sampler draws are independent of other Philox users of one seed.
inline constexpr std::uint64_t kTrainSamplerKeyTag = 0xDA7A5A3B1E5EED00ull;

class TrainSampler {
 public:
  // Throws when the stream is shorter than seq_len + 1 tokens (naming the shards and lengths).
  TrainSampler(const ShardSet& shards, std::int64_t seq_len, std::uint64_t seed);

  std::int64_t seq_len() const { return seq_len_; }
  std::int64_t valid_starts() const { return valid_starts_; }  // N - T

  // Start of the window of global sample `sample` at `step`.
  std::int64_t window_start(std::int64_t step, std::int64_t sample) const;

  void fill_batch(std::int64_t step, std::int64_t first_sample, std::int64_t count,
                  Tensor& inputs,    // (count, T) i32
                  Tensor& targets);  // (count, T) i32

 private:
  const ShardSet* shards_;
  std::int64_t seq_len_;
  std::uint64_t seed_;
  std::int64_t valid_starts_;
};

class EvalSampler {
 public:
  EvalSampler(const ShardSet& shards, std::int64_t seq_len);

  std::int64_t seq_len() const { return seq_len_; }
  std::int64_t num_windows() const { return num_windows_; }  // (N - 1) / T

  // Windows [first_window, first_window + count), each must be < num_windows().
  void fill_batch(std::int64_t first_window, std::int64_t count,
                  Tensor& inputs,    // (count, T) i32
                  Tensor& targets);  // (count, T) i32

 private:
  const ShardSet* shards_;
  std::int64_t seq_len_;
  std::int64_t num_windows_;
};

}  // namespace myriad::data
