// Philox: known-answer test from Random123, split invariance and distribution sanity.
#include <gtest/gtest.h>

#include <cmath>

#include "myriad/core/philox.h"
#include "myriad/core/tensor.h"
#include "reference.h"

namespace myriad {
namespace {

TEST(Philox, MatchesRandom123KnownAnswers) {
  // Random123 kat_vectors, philox4x32_10: counter {0,0,0,0} key {0,0} and all-ones.
  auto zero = philox4x32(0, 0, 0);
  EXPECT_EQ(zero[0], 0x6627e8d5u);
  EXPECT_EQ(zero[1], 0xe169c58du);
  EXPECT_EQ(zero[2], 0xbc57ac4cu);
  EXPECT_EQ(zero[3], 0x9b00dbd8u);
  auto ones = philox4x32(~0ull, ~0ull, ~0ull);
  EXPECT_EQ(ones[0], 0x408f276du);
  EXPECT_EQ(ones[1], 0x41c83b0eu);
  EXPECT_EQ(ones[2], 0xa20bc7c6u);
  EXPECT_EQ(ones[3], 0x6d5451fdu);
}

TEST(Philox, FillIsIndependentOfHowTheWorkIsSplit) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Tensor whole = Tensor::empty({64, 33});
  fill_normal(whole, 0.0f, 0.02f, seed, 7);
  // Fill the second half of the rows alone, as a shard owner would.
  Tensor shard = Tensor::empty({32, 33});
  fill_normal(shard, 0.0f, 0.02f, seed, 7, 32 * 33);
  EXPECT_EQ(testing::to_f64(shard), testing::to_f64(whole.slice(0, 32, 64)));
}

TEST(Philox, MomentsAreRight) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const int n = 200000;
  double su = 0, su2 = 0, sn = 0, sn2 = 0;
  for (int i = 0; i < n; ++i) {
    double u = philox_uniform(seed, 3, i), z = philox_normal(seed, 4, i);
    ASSERT_GE(u, 0.0);
    ASSERT_LT(u, 1.0);
    su += u;
    su2 += u * u;
    sn += z;
    sn2 += z * z;
  }
  // 5-sigma bounds on the sample mean / variance.
  EXPECT_NEAR(su / n, 0.5, 5 * std::sqrt(1.0 / 12 / n));
  EXPECT_NEAR(su2 / n - (su / n) * (su / n), 1.0 / 12, 0.002);
  EXPECT_NEAR(sn / n, 0.0, 5 * std::sqrt(1.0 / n));
  EXPECT_NEAR(sn2 / n, 1.0, 5 * std::sqrt(2.0 / n));
}

}  // namespace
}  // namespace myriad
