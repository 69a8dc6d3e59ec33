// The exact-sum kernels (kernels/comm/exact_sum.cu) against the host encoding (ops/exact_sum.h):
// the block exponents, the int64 terms and the decoded f32 values are the host's bits, for sizes
// around the block of 256, values spread over many binades (subnormals, the largest finite
// floats), blocks of zeros, blocks with a NaN or an infinity, every headroom a group can have
// (1 to 2^31 members) and decoding a chunk that starts inside a block (a reduce-scatter's). The
// sums fed to the decode are those of several simulated ranks, so results that round, become
// subnormal or overflow to inf are covered. Argument errors run everywhere; the rest skips
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "gpu_test_support.h"
#include "myriad/cuda/kernels.h"
#include "myriad/ops/exact_sum.h"

namespace myriad {
namespace {

using testing::DeviceArray;
using testing::expect_error_mentions;

std::vector<std::uint32_t> bits_of(const std::vector<float>& values) {
  std::vector<std::uint32_t> out(values.size());
  std::memcpy(out.data(), values.data(), values.size() * sizeof(float));
  return out;
}

// Rank `rank`'s n values: random mantissas times 2^e with e over [-150, 127] in runs, so blocks
// differ in their exponent; then zeros, a zero block, a NaN block and an infinity block.
std::vector<float> rank_values(std::int64_t n, int rank, std::uint64_t seed) {
  const std::vector<float> unit = testing::random_floats(n, -1.0f, 1.0f, seed, 100 + rank);
  std::vector<float> x(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    const int exponent = static_cast<int>((i / 97 * 37 + rank * 11) % 278) - 150;
    x[static_cast<std::size_t>(i)] = std::ldexp(unit[static_cast<std::size_t>(i)], exponent);
  }
  for (std::int64_t i = 0; i < n; i += 13) x[static_cast<std::size_t>(i)] = 0.0f;
  if (n >= 4 * kExactSumBlock) {
    for (std::int64_t i = kExactSumBlock; i < 2 * kExactSumBlock; ++i) x[static_cast<std::size_t>(i)] = 0.0f;
    if (rank == 1) x[2 * kExactSumBlock + 5] = std::numeric_limits<float>::quiet_NaN();
    if (rank == 2) x[3 * kExactSumBlock + 7] = -std::numeric_limits<float>::infinity();
    x[static_cast<std::size_t>(n - 1)] = std::numeric_limits<float>::max();  // the largest exponent, 128
  }
  return x;
}

TEST(ExactSumKernels, EqualTheHostEncodingBitForBit) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  for (std::int64_t n : {1, 255, 256, 257, 1024, 4099, 100003}) {
    for (int ranks : {1, 3, 4}) {
      SCOPED_TRACE("n " + std::to_string(n) + ", " + std::to_string(ranks) + " ranks");
      const std::int64_t blocks = exact_sum_blocks(n);
      // The group's exponents: each rank's from the kernel (equal to the host's), then their max.
      std::vector<std::int32_t> group(static_cast<std::size_t>(blocks), kExactSumZeroBlock);
      std::vector<std::vector<float>> values;
      for (int r = 0; r < ranks; ++r) {
        values.push_back(rank_values(n, r, seed));
        std::vector<std::int32_t> host(static_cast<std::size_t>(blocks));
        exact_sum_exponents(values.back().data(), n, host.data());
        DeviceArray<float> x(context, values.back(), r % 3);  // unaligned to 16 bytes too
        DeviceArray<std::int32_t> exponents(context, blocks);
        cuda::exact_sum_exponents_f32(x.get(), n, exponents.get(), context.stream());
        ASSERT_EQ(exponents.download(), host) << "rank " << r;
        for (std::int64_t b = 0; b < blocks; ++b) {
          group[static_cast<std::size_t>(b)] = std::max(group[static_cast<std::size_t>(b)], host[b]);
        }
      }
      for (int headroom : {exact_sum_headroom(ranks), 0, 31}) {
        SCOPED_TRACE("headroom " + std::to_string(headroom));
        if (headroom < exact_sum_headroom(ranks)) continue;  // the sum below could overflow
        DeviceArray<std::int32_t> exponents(context, group);
        std::vector<std::int64_t> sum(static_cast<std::size_t>(n), 0), host_q(static_cast<std::size_t>(n));
        for (int r = 0; r < ranks; ++r) {
          to_exact_fixed(values[r].data(), n, group.data(), headroom, host_q.data());
          DeviceArray<float> x(context, values[r]);
          DeviceArray<std::int64_t> q(context, n);
          cuda::to_exact_fixed_f32(x.get(), n, exponents.get(), headroom, q.get(), context.stream());
          ASSERT_EQ(q.download(), host_q) << "rank " << r;
          for (std::int64_t i = 0; i < n; ++i) sum[static_cast<std::size_t>(i)] += host_q[static_cast<std::size_t>(i)];
        }
        // Decode the whole buffer and a chunk that starts inside a block.
        for (std::int64_t first : {std::int64_t{0}, n / 3}) {
          const std::int64_t count = n - first;
          const std::vector<std::int64_t> part(sum.begin() + first, sum.end());
          std::vector<float> host(static_cast<std::size_t>(count));
          from_exact_fixed(part.data(), first, count, group.data(), headroom, host.data());
          DeviceArray<std::int64_t> q(context, part);
          DeviceArray<float> out(context, count, 1);
          cuda::from_exact_fixed_f32(q.get(), first, count, exponents.get(), headroom, out.get(), context.stream());
          ASSERT_EQ(bits_of(out.download()), bits_of(host)) << "decoded from element " << first;
        }
      }
    }
  }
}

TEST(ExactSumKernels, DecodesSubnormalAndOverflowingSumsLikeTheHost) {
  MYRIAD_REQUIRE_GPU();
  cuda::DeviceContext context(0);
  // One block per case: the smallest exponent with headroom 31 (2^k far below the normal floats:
  // every result subnormal or 0, one rounding), and the largest with a sum past the f32 range.
  const std::vector<std::int32_t> exponents{-125, 128};
  std::vector<std::int64_t> q(2 * static_cast<std::size_t>(kExactSumBlock));
  for (std::int64_t i = 0; i < kExactSumBlock; ++i) {
    q[static_cast<std::size_t>(i)] = (i % 2 == 0 ? 1 : -1) * ((std::int64_t{1} << (i % 62)) + 3 * i);
    q[static_cast<std::size_t>(kExactSumBlock + i)] = (std::int64_t{1} << 61) - 7 * i;
  }
  const std::int64_t n = static_cast<std::int64_t>(q.size());
  for (int headroom : {1, 31}) {
    std::vector<float> host(q.size());
    from_exact_fixed(q.data(), 0, n, exponents.data(), headroom, host.data());
    DeviceArray<std::int64_t> dq(context, q);
    DeviceArray<std::int32_t> de(context, exponents);
    DeviceArray<float> out(context, n);
    cuda::from_exact_fixed_f32(dq.get(), 0, n, de.get(), headroom, out.get(), context.stream());
    EXPECT_EQ(bits_of(out.download()), bits_of(host)) << "headroom " << headroom;
  }
}

TEST(ExactSumKernels, RejectBadArguments) {
  std::int32_t exponent = 0;
  float value = 0.0f;
  std::int64_t term = 0;
  expect_error_mentions([&] { cuda::exact_sum_exponents_f32(&value, -1, &exponent, nullptr); },
                        {"exact_sum_exponents_f32", "n must be >= 0"});
  expect_error_mentions([&] { cuda::to_exact_fixed_f32(&value, 1, &exponent, 32, &term, nullptr); },
                        {"to_exact_fixed_f32", "headroom 32"});
  expect_error_mentions([&] { cuda::from_exact_fixed_f32(&term, -1, 1, &exponent, 0, &value, nullptr); },
                        {"from_exact_fixed_f32", "first must be >= 0"});
  expect_error_mentions([&] { cuda::from_exact_fixed_f32(&term, 0, 1, nullptr, 0, &value, nullptr); },
                        {"from_exact_fixed_f32", "exponents is null"});
}

}  // namespace
}  // namespace myriad
