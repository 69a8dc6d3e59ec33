// The exact-sum encoding (exact_sum.h) against float64 references, in one process: the fixed-point
// terms of several "ranks" summed in every order give one result, within half an f32 ulp plus
// the stated grid error of the exact sum; a lone rank's values come back bit for bit when they
// are within 2^38 of their block's largest; special values and block edges.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "myriad/ops/exact_sum.h"

namespace myriad {
namespace {

using Values = std::vector<float>;

// The group's exponents of `ranks` buffers: the element-wise max of each rank's.
std::vector<std::int32_t> group_exponents(const std::vector<Values>& ranks) {
  const auto n = static_cast<std::int64_t>(ranks[0].size());
  std::vector<std::int32_t> group(static_cast<std::size_t>(exact_sum_blocks(n)), kExactSumZeroBlock), mine(group);
  for (const Values& values : ranks) {
    exact_sum_exponents(values.data(), n, mine.data());
    for (std::size_t b = 0; b < group.size(); ++b) group[b] = std::max(group[b], mine[b]);
  }
  return group;
}

// The exact sum of `ranks`, adding their fixed-point terms in the order `order`.
Values exact_sum(const std::vector<Values>& ranks, const std::vector<int>& order) {
  const auto n = static_cast<std::int64_t>(ranks[0].size());
  const int headroom = exact_sum_headroom(static_cast<int>(ranks.size()));
  const std::vector<std::int32_t> exponents = group_exponents(ranks);
  std::vector<std::int64_t> total(static_cast<std::size_t>(n), 0), term(total);
  for (int r : order) {
    to_exact_fixed(ranks[static_cast<std::size_t>(r)].data(), n, exponents.data(), headroom, term.data());
    for (std::size_t i = 0; i < total.size(); ++i) total[i] += term[i];
  }
  Values out(static_cast<std::size_t>(n));
  from_exact_fixed(total.data(), 0, n, exponents.data(), headroom, out.data());
  return out;
}

std::vector<Values> random_ranks(int count, std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> scale(-30, 10);
  std::vector<Values> ranks(static_cast<std::size_t>(count), Values(static_cast<std::size_t>(n)));
  for (Values& values : ranks) {
    for (float& x : values) x = std::ldexp(normal(rng), scale(rng));  // magnitudes spread over 2^40
  }
  return ranks;
}

bool same_bits(const Values& a, const Values& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(ExactSum, HeadroomCoversTheMembers) {
  EXPECT_EQ(exact_sum_headroom(1), 0);
  EXPECT_EQ(exact_sum_headroom(2), 1);
  EXPECT_EQ(exact_sum_headroom(3), 2);
  EXPECT_EQ(exact_sum_headroom(4), 2);
  EXPECT_EQ(exact_sum_headroom(1000), 10);
  EXPECT_EQ(exact_sum_blocks(0), 0);
  EXPECT_EQ(exact_sum_blocks(kExactSumBlock), 1);
  EXPECT_EQ(exact_sum_blocks(kExactSumBlock + 1), 2);
}

TEST(ExactSum, EveryOrderGivesTheSameBitsWithinTheStatedError) {
  for (int count : {2, 3, 7, 64}) {
    const std::int64_t n = 3 * kExactSumBlock + 17;
    const std::vector<Values> ranks = random_ranks(count, n, 40u + static_cast<std::uint32_t>(count));
    std::vector<int> order(static_cast<std::size_t>(count));
    std::iota(order.begin(), order.end(), 0);
    const Values first = exact_sum(ranks, order);
    std::mt19937 rng(7);
    for (int trial = 0; trial < 5; ++trial) {
      std::shuffle(order.begin(), order.end(), rng);
      EXPECT_TRUE(same_bits(exact_sum(ranks, order), first)) << count << " ranks, order " << trial;
    }
    const std::vector<std::int32_t> exponents = group_exponents(ranks);
    const int headroom = exact_sum_headroom(count);
    std::int64_t beyond = 0, float_order_differs = 0;
    for (std::int64_t i = 0; i < n; ++i) {
      double want = 0.0;
      float forward = 0.0f, backward = 0.0f;
      for (int r = 0; r < count; ++r) {
        want += ranks[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
        forward += ranks[static_cast<std::size_t>(r)][static_cast<std::size_t>(i)];
        backward += ranks[static_cast<std::size_t>(count - 1 - r)][static_cast<std::size_t>(i)];
      }
      if (forward != backward) ++float_order_differs;
      const float got = first[static_cast<std::size_t>(i)];
      const double half_ulp =
          0.5 * (std::nextafter(std::fabs(static_cast<float>(want)), std::numeric_limits<float>::infinity()) -
                 std::fabs(static_cast<float>(want)));
      const double grid =
          count * std::ldexp(1.0, exponents[static_cast<std::size_t>(i / kExactSumBlock)] + headroom - 63);
      if (std::fabs(got - want) > half_ulp + grid) ++beyond;
    }
    EXPECT_EQ(beyond, 0) << count << " ranks";
    if (count >= 3) EXPECT_GT(float_order_differs, 0) << "the f32 orders never differ: the test shows nothing";
  }
}

TEST(ExactSum, OneMemberRoundTripsBitForBit) {
  Values x(2 * kExactSumBlock);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  // |x| in [2^(k-1), 2^k), k from -20 to 17: every value within 2^38 of its block's largest.
  for (std::size_t i = 0; i < x.size(); ++i) {
    const float u = unit(rng);
    x[i] = std::copysign(0.5f + 0.5f * std::fabs(u), u) * std::ldexp(1.0f, static_cast<int>(i % 38) - 20);
  }
  x[5] = 0.0f;
  x[kExactSumBlock] = -std::numeric_limits<float>::denorm_min() * 0.0f;  // -0 sums to +0
  EXPECT_TRUE(same_bits(exact_sum({x}, {0}), [&] {
    Values want = x;
    want[kExactSumBlock] = 0.0f;
    return want;
  }()));
}

TEST(ExactSum, NonFiniteValuesPoisonTheirBlockOnly) {
  const std::int64_t n = 3 * kExactSumBlock;
  std::vector<Values> ranks = random_ranks(3, n, 9);
  ranks[1][10] = std::numeric_limits<float>::quiet_NaN();
  ranks[2][kExactSumBlock + 3] = -std::numeric_limits<float>::infinity();
  for (float& x : ranks[0]) x = x * 0.0f;  // block 2 below stays ordinary on the other ranks
  const Values sum = exact_sum(ranks, {2, 0, 1});
  for (std::int64_t i = 0; i < 2 * kExactSumBlock; ++i) EXPECT_TRUE(std::isnan(sum[static_cast<std::size_t>(i)])) << i;
  for (std::int64_t i = 2 * kExactSumBlock; i < n; ++i) {
    const auto at = static_cast<std::size_t>(i);
    EXPECT_TRUE(std::isfinite(sum[at])) << i;
    EXPECT_NEAR(sum[at], static_cast<double>(ranks[1][at]) + ranks[2][at], 1e-6 * std::fabs(sum[at]) + 1e-12);
  }
}

TEST(ExactSum, ZeroBlocksSumToZeroAndTinyValuesSurvive) {
  const std::int64_t n = 2 * kExactSumBlock;
  std::vector<Values> ranks(2, Values(static_cast<std::size_t>(n), 0.0f));
  ranks[0][kExactSumBlock] = std::numeric_limits<float>::denorm_min();
  ranks[1][kExactSumBlock + 1] = std::numeric_limits<float>::min();
  const Values sum = exact_sum(ranks, {0, 1});
  for (std::int64_t i = 0; i < kExactSumBlock; ++i) EXPECT_EQ(sum[static_cast<std::size_t>(i)], 0.0f);
  EXPECT_EQ(sum[kExactSumBlock], std::numeric_limits<float>::denorm_min());
  EXPECT_EQ(sum[kExactSumBlock + 1], std::numeric_limits<float>::min());
}

}  // namespace
}  // namespace myriad
