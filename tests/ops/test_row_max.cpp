// row_max and streamed_row_max (src/ops/cpu/row_max.h, internal to the CPU ops) against a plain
// loop over fresh random rows: every length from 0 to 80 and GPT-2's 50257, with the largest
// element planted in each of the streamed version's four parts and in its tail; NaN skipped
// wherever it sits, an all-NaN or empty row -inf. A wrong maximum would not show in
// cross-entropy's results (lse does not depend on the shift) unless it overflowed, hence these.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "../../src/ops/cpu/row_max.h"
#include "reference.h"

namespace myriad {
namespace {

float plain_max(const std::vector<float>& x) {
  float m = -std::numeric_limits<float>::infinity();
  for (float v : x) {
    if (v > m) m = v;  // false for NaN: skipped
  }
  return m;
}

std::vector<float> random_row(std::int64_t n, std::uint64_t seed, std::uint64_t stream) {
  if (n == 0) return {};
  const std::vector<double> values = testing::to_f64(testing::random_tensor({n}, seed, stream, -50.0f, 50.0f));
  return std::vector<float>(values.begin(), values.end());
}

void expect_both_find(const std::vector<float>& x, const std::string& what) {
  const float expected = plain_max(x);
  const auto n = static_cast<std::int64_t>(x.size());
  EXPECT_EQ(cpu::row_max(x.data(), n), expected) << what;
  EXPECT_EQ(cpu::streamed_row_max(x.data(), n), expected) << what;
}

TEST(RowMax, BothFindTheLargestWhereverItSits) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  std::vector<std::int64_t> lengths;
  for (std::int64_t n = 0; n <= 80; ++n) lengths.push_back(n);
  lengths.push_back(50257);
  std::uint64_t stream = 0;
  for (std::int64_t n : lengths) {
    std::vector<float> x = random_row(n, seed, stream++);
    expect_both_find(x, "random row of " + std::to_string(n));
    if (n == 0) continue;
    // The largest in each quarter (the streamed version's parts) and in the last element (its tail).
    const std::int64_t part = n / 4;
    for (std::int64_t at : {std::int64_t{0}, part, 2 * part, 3 * part + (part > 0 ? part - 1 : 0), n - 1}) {
      if (at >= n) continue;
      std::vector<float> planted = x;
      planted[static_cast<std::size_t>(at)] = 1000.0f;
      expect_both_find(planted, "1000 at " + std::to_string(at) + " of " + std::to_string(n));
    }
  }
}

TEST(RowMax, NanIsSkippedAndAnAllNanRowIsMinusInfinity) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  for (std::int64_t n : {std::int64_t{1}, std::int64_t{7}, std::int64_t{37}, std::int64_t{50257}}) {
    std::vector<float> x = random_row(n, seed, static_cast<std::uint64_t>(n));
    const float expected = plain_max(x);
    for (std::int64_t at : {std::int64_t{0}, n / 2, n - 1}) {
      std::vector<float> with_nan = x;
      with_nan[static_cast<std::size_t>(at)] = std::nanf("");
      if (n == 1) {
        EXPECT_EQ(cpu::streamed_row_max(with_nan.data(), n), -std::numeric_limits<float>::infinity());
        continue;
      }
      EXPECT_EQ(cpu::streamed_row_max(with_nan.data(), n), plain_max(with_nan)) << "NaN at " << at << " of " << n;
      EXPECT_LE(cpu::streamed_row_max(with_nan.data(), n), expected);
    }
    const std::vector<float> all_nan(static_cast<std::size_t>(n), std::nanf(""));
    EXPECT_EQ(cpu::row_max(all_nan.data(), n), -std::numeric_limits<float>::infinity()) << n;
    EXPECT_EQ(cpu::streamed_row_max(all_nan.data(), n), -std::numeric_limits<float>::infinity()) << n;
  }
  EXPECT_EQ(cpu::streamed_row_max(nullptr, 0), -std::numeric_limits<float>::infinity());
}

}  // namespace
}  // namespace myriad
