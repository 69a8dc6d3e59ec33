// MixtureSampler: each sample's source and window depend on (seed, step, sample) only — the same
// batch however it is split across calls (ranks); the sources' shares follow the weights (within
// 4 standard deviations over 20000 samples); one source reproduces TrainSampler; a source too
// short or a weight <= 0 is refused naming it.
#include <gtest/gtest.h>

#include <cmath>

#include "myriad/core/error.h"
#include "myriad/data/mixture_sampler.h"
#include "myriad/data/shard_writer.h"
#include "temp_dir.h"

namespace myriad::data {
namespace {

using testing::TempDir;

// A stream whose tokens say which source they come from: source k holds k * 1000 + (i % 1000).
ShardSet source_stream(const TempDir& dir, int k, std::int64_t n) {
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i)
    ids[static_cast<std::size_t>(i)] = static_cast<std::int32_t>(k * 1000 + i % 1000);
  const std::string folder = dir / ("s" + std::to_string(k));
  std::filesystem::create_directories(folder);
  write_token_shard(shard_path(folder, "train", 0), ids, 4000);
  return ShardSet::open_split(folder, "train");
}

TEST(MixtureSampler, SamplesDependOnStepAndIndexOnlyAndFollowTheWeights) {
  TempDir dir;
  ShardSet a = source_stream(dir, 0, 5000), b = source_stream(dir, 1, 3000), c = source_stream(dir, 2, 800);
  const MixtureSampler sampler({&a, &b, &c}, {0.5, 0.3, 0.2}, 16, 42);
  Tensor whole = Tensor::empty({8, 16}, DType::i32), whole_t = whole.clone();
  Tensor half = Tensor::empty({4, 16}, DType::i32), half_t = half.clone();
  std::vector<std::int64_t> counts;
  for (std::int64_t step = 0; step < 20; ++step) {
    sampler.fill_batch(step, 0, 8, whole, whole_t, &counts);
    for (std::int64_t part = 0; part < 2; ++part) {  // the same rows from two "ranks"
      sampler.fill_batch(step, part * 4, 4, half, half_t);
      for (std::int64_t i = 0; i < 4 * 16; ++i) {
        ASSERT_EQ(half.data<std::int32_t>()[i], whole.data<std::int32_t>()[part * 64 + i]);
        ASSERT_EQ(half_t.data<std::int32_t>()[i], whole_t.data<std::int32_t>()[part * 64 + i]);
      }
    }
    for (std::int64_t j = 0; j < 8; ++j) {  // every row from the source source_of names, contiguous
      const std::int32_t first = whole.data<std::int32_t>()[j * 16];
      EXPECT_EQ(static_cast<std::size_t>(first / 1000), sampler.source_of(step, j));
      EXPECT_EQ(whole_t.data<std::int32_t>()[j * 16], first % 1000 == 999 ? first - 999 : first + 1);
    }
  }
  EXPECT_EQ(counts[0] + counts[1] + counts[2], 20 * 8 * 16);
  std::vector<double> seen(3, 0.0);
  const int n = 20000;
  for (int j = 0; j < n; ++j) seen[sampler.source_of(7, j)] += 1.0;
  const std::vector<double> weights = {0.5, 0.3, 0.2};
  for (int k = 0; k < 3; ++k) {
    const double sigma = std::sqrt(n * weights[k] * (1 - weights[k]));
    EXPECT_NEAR(seen[k], n * weights[k], 4 * sigma) << "source " << k;
  }
}

TEST(MixtureSampler, OneSourceIsTheTrainSampler) {
  TempDir dir;
  ShardSet a = source_stream(dir, 0, 5000);
  MixtureSampler mixture({&a}, {2.0}, 32, 9);
  TrainSampler plain(a, 32, 9);
  Tensor x = Tensor::empty({6, 32}, DType::i32), xt = x.clone(), y = x.clone(), yt = x.clone();
  for (std::int64_t step = 0; step < 5; ++step) {
    mixture.fill_batch(step, 3, 6, x, xt);
    plain.fill_batch(step, 3, 6, y, yt);
    for (std::int64_t i = 0; i < 6 * 32; ++i) ASSERT_EQ(x.data<std::int32_t>()[i], y.data<std::int32_t>()[i]);
  }
}

TEST(MixtureSampler, RefusesShortSourcesAndBadWeights) {
  TempDir dir;
  ShardSet a = source_stream(dir, 0, 5000), tiny = source_stream(dir, 1, 10);
  try {
    const MixtureSampler refused({&a, &tiny}, {1.0, 1.0}, 32, 1);  // the constructor should throw
    ADD_FAILURE() << "a source shorter than a window was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("data source 1"), std::string::npos) << e.what();
  }
  EXPECT_THROW(MixtureSampler({&a, &a}, {1.0, 0.0}, 32, 1), Error);
}

}  // namespace
}  // namespace myriad::data
