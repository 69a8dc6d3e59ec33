// Samplers over a stream whose token at position p is p itself (vocab > N), so every window's
// offset can be read off its first token: split invariance across calls and thread counts,
// step / seed dependence, bounds and uniformity over the valid starts, next-token targets,
// eval windows, and the errors (too-short stream naming files and lengths, bad tensors).
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "myriad/data/sampler.h"
#include "myriad/data/shard_writer.h"
#include "reference.h"
#include "temp_dir.h"
#include "test_helpers.h"

namespace myriad::data {
namespace {

using testing::expect_error_naming;
using testing::TempDir;

// Writes the stream 0, 1, ..., n-1 as train shards of the given sizes (summing to n).
ShardSet identity_stream(const TempDir& dir, const std::vector<std::int64_t>& sizes) {
  std::int64_t next = 0;
  for (std::size_t s = 0; s < sizes.size(); ++s) {
    std::vector<std::int32_t> ids;
    for (std::int64_t i = 0; i < sizes[s]; ++i) ids.push_back(static_cast<std::int32_t>(next++));
    write_token_shard(shard_path(dir.str(), "train", static_cast<std::int64_t>(s)), ids, 1 << 20);
  }
  return ShardSet::open_split(dir.str(), "train");
}

struct Batch {
  Tensor inputs, targets;
};

Batch train_batch(TrainSampler& sampler, std::int64_t step, std::int64_t first, std::int64_t count) {
  Batch b{Tensor::empty({count, sampler.seq_len()}, DType::i32), Tensor::empty({count, sampler.seq_len()}, DType::i32)};
  sampler.fill_batch(step, first, count, b.inputs, b.targets);
  return b;
}

std::vector<std::int32_t> values(const Tensor& t) {
  const std::int32_t* p = t.data<std::int32_t>();
  return std::vector<std::int32_t>(p, p + t.numel());
}

TEST(TrainSampler, WindowsAreContiguousNextTokenPairsWithinBounds) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  TempDir dir;
  ShardSet shards = identity_stream(dir, {300, 1, 0, 700});  // windows cross the boundaries
  const std::int64_t T = 33;
  TrainSampler sampler(shards, T, seed);
  EXPECT_EQ(sampler.valid_starts(), 1001 - T);
  for (std::int64_t step = 0; step < 20; ++step) {
    Batch b = train_batch(sampler, step, 0, 16);
    const std::int32_t* in = b.inputs.data<std::int32_t>();
    const std::int32_t* tg = b.targets.data<std::int32_t>();
    for (std::int64_t j = 0; j < 16; ++j) {
      std::int64_t o = sampler.window_start(step, j);
      ASSERT_GE(o, 0);
      ASSERT_LE(o + T + 1, shards.size());
      for (std::int64_t t = 0; t < T; ++t) {
        ASSERT_EQ(in[j * T + t], o + t) << "step " << step << " sample " << j;
        ASSERT_EQ(tg[j * T + t], o + t + 1) << "step " << step << " sample " << j;
      }
    }
  }
}

TEST(TrainSampler, SplitAcrossCallsAndThreadsGivesTheSerialBatch) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  TempDir dir;
  ShardSet shards = identity_stream(dir, {5000, 3000});
  TrainSampler sampler(shards, 64, seed);
  testing::ThreadCountGuard guard;
  omp_set_num_threads(1);
  Batch whole = train_batch(sampler, 42, 0, 24);
  omp_set_num_threads(2);
  EXPECT_EQ(values(train_batch(sampler, 42, 0, 24).inputs), values(whole.inputs));
  // Four "ranks" of 6 samples, and an uneven split, each equal to its rows of the whole batch.
  for (std::vector<std::int64_t> cuts : {std::vector<std::int64_t>{0, 6, 12, 18, 24}, {0, 1, 11, 24}}) {
    for (std::size_t r = 0; r + 1 < cuts.size(); ++r) {
      Batch part = train_batch(sampler, 42, cuts[r], cuts[r + 1] - cuts[r]);
      EXPECT_EQ(values(part.inputs), values(whole.inputs.slice(0, cuts[r], cuts[r + 1]).contiguous()));
      EXPECT_EQ(values(part.targets), values(whole.targets.slice(0, cuts[r], cuts[r + 1]).contiguous()));
    }
  }
  // A fresh sampler (a resumed run) reproduces step 42 from the step alone.
  TrainSampler resumed(shards, 64, seed);
  EXPECT_EQ(values(train_batch(resumed, 42, 0, 24).inputs), values(whole.inputs));
}

TEST(TrainSampler, StepsAndSeedsChangeTheWindows) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  TempDir dir;
  ShardSet shards = identity_stream(dir, {100000});
  TrainSampler sampler(shards, 16, seed), other_seed(shards, 16, seed + 1);
  // With ~1e5 starts, two batches of 8 coincide with probability ~1e-40.
  EXPECT_NE(values(train_batch(sampler, 0, 0, 8).inputs), values(train_batch(sampler, 1, 0, 8).inputs));
  EXPECT_NE(values(train_batch(sampler, 5, 0, 8).inputs), values(train_batch(other_seed, 5, 0, 8).inputs));
  // Samples within a step differ too (not one offset repeated).
  std::set<std::int64_t> starts;
  for (std::int64_t j = 0; j < 8; ++j) starts.insert(sampler.window_start(3, j));
  EXPECT_GT(starts.size(), 6u);
}

TEST(TrainSampler, StartsAreUniformOverEveryValidStart) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  TempDir dir;
  ShardSet shards = identity_stream(dir, {10});
  TrainSampler sampler(shards, 5, seed);  // windows of 6 tokens: starts 0..4
  ASSERT_EQ(sampler.valid_starts(), 5);
  const int draws = 50000;
  std::vector<int> counts(5, 0);
  for (int i = 0; i < draws; ++i) {
    std::int64_t o = sampler.window_start(i / 100, i % 100);
    ASSERT_GE(o, 0);
    ASSERT_LT(o, 5);
    ++counts[o];
  }
  // Chi-square with 4 degrees of freedom: P(> 25) < 1e-4.
  double chi2 = 0;
  for (int c : counts) chi2 += (c - draws / 5.0) * (c - draws / 5.0) / (draws / 5.0);
  EXPECT_LT(chi2, 25.0);
}

TEST(TrainSampler, TooShortStreamNamesFilesAndLengths) {
  TempDir dir;
  ShardSet shards = identity_stream(dir, {5, 3});
  expect_error_naming(
      [&] { TrainSampler(shards, 8, 1); },
      {"too short", "needs 9 tokens", "has 8", "train_000000.bin (5 tokens)", "train_000001.bin (3 tokens)"});
  expect_error_naming([&] { EvalSampler(shards, 8); }, {"too short", "needs 9 tokens", "has 8", "train_000001.bin"});
  TrainSampler exact(shards, 7, 1);  // 8 tokens: exactly one window
  EXPECT_EQ(exact.valid_starts(), 1);
  EXPECT_EQ(exact.window_start(123, 456), 0);
  expect_error_naming([&] { TrainSampler(shards, 0, 1); }, {"seq_len must be positive"});
}

TEST(TrainSampler, RejectsWrongTensors) {
  TempDir dir;
  ShardSet shards = identity_stream(dir, {100});
  TrainSampler sampler(shards, 8, 1);
  Tensor good = Tensor::empty({4, 8}, DType::i32);
  Tensor wrong_shape = Tensor::empty({4, 9}, DType::i32);
  Tensor wrong_dtype = Tensor::empty({4, 8}, DType::f32);
  Tensor strided = Tensor::empty({8, 4}, DType::i32).transpose(0, 1);
  expect_error_naming([&] { sampler.fill_batch(0, 0, 4, wrong_shape, good); }, {"inputs", "i32[4, 8]", "[4, 9]"});
  expect_error_naming([&] { sampler.fill_batch(0, 0, 4, good, wrong_dtype); }, {"targets", "i32[4, 8]", "f32"});
  expect_error_naming([&] { sampler.fill_batch(0, 0, 4, strided, good); }, {"inputs", "contiguous"});
  expect_error_naming([&] { sampler.fill_batch(-1, 0, 4, good, good); }, {"step -1"});
}

TEST(EvalSampler, WalksTheStreamInConsecutiveWindows) {
  TempDir dir;
  ShardSet shards = identity_stream(dir, {40, 61});  // N = 101
  EvalSampler sampler(shards, 10);
  EXPECT_EQ(sampler.num_windows(), 10);  // (101 - 1) / 10: window 9 uses tokens 90..100
  Tensor inputs = Tensor::empty({3, 10}, DType::i32), targets = Tensor::empty({3, 10}, DType::i32);
  sampler.fill_batch(7, 3, inputs, targets);
  for (std::int64_t j = 0; j < 3; ++j)
    for (std::int64_t t = 0; t < 10; ++t) {
      EXPECT_EQ(inputs.get({j, t}), (7 + j) * 10 + t);
      EXPECT_EQ(targets.get({j, t}), (7 + j) * 10 + t + 1);
    }
  expect_error_naming([&] { sampler.fill_batch(8, 3, inputs, targets); }, {"windows [8, 11)", "outside [0, 10)"});
  EvalSampler tight(shards, 100);
  EXPECT_EQ(tight.num_windows(), 1);
}

}  // namespace
}  // namespace myriad::data
