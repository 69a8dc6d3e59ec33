// nn::sample_token against its definition on fresh random logits: greedy is the argmax; the
// frequencies of many seeded draws match the softmax at the temperature computed in float64 (all
// ids, top_k, top_p); ids outside top_k, the nucleus or vocab_limit are never drawn; the same seed
// and index give the same token. log_probability against a float64 log-softmax.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <vector>

#include "../support/reference.h"
#include "myriad/core/philox.h"
#include "myriad/nn/generate.h"
#include "myriad/nn/sampling.h"

namespace myriad::nn {
namespace {

std::vector<float> random_logits(std::int64_t V, std::uint64_t seed) {
  std::vector<float> l(V);
  for (std::int64_t i = 0; i < V; ++i) l[i] = 3.0f * (philox_uniform(seed, 9, static_cast<std::uint64_t>(i)) - 0.5f);
  return l;
}

// The probabilities sample_token's definition gives (float64): candidates sorted descending, top_k,
// temperature, then the top_p prefix, renormalised.
std::vector<double> expected_probabilities(const std::vector<float>& l, const GenerateArgs& args) {
  const auto V = static_cast<std::int64_t>(l.size());
  std::vector<std::int64_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](std::int64_t a, std::int64_t b) { return l[a] > l[b]; });
  const std::int64_t k = args.top_k > 0 ? std::min<std::int64_t>(args.top_k, V) : V;
  std::vector<double> w(V, 0.0);
  double total = 0.0;
  for (std::int64_t i = 0; i < k; ++i) total += w[order[i]] = std::exp((l[order[i]] - l[order[0]]) / args.temperature);
  if (args.top_p < 1.0f) {
    double kept = 0.0;
    std::int64_t m = 0;
    while (m < k && kept < args.top_p * total) kept += w[order[m++]];
    for (std::int64_t i = m; i < k; ++i) w[order[i]] = 0.0;
    total = kept;
  }
  for (double& x : w) x /= total;
  return w;
}

void expect_frequencies_match(const std::vector<float>& l, GenerateArgs args, const std::string& what) {
  const std::vector<double> p = expected_probabilities(l, args);
  constexpr int kDraws = 40000;
  std::vector<int> counts(l.size(), 0);
  for (int i = 0; i < kDraws; ++i) ++counts[sample_token(l.data(), static_cast<std::int64_t>(l.size()), args, i)];
  for (std::size_t id = 0; id < l.size(); ++id) {
    if (p[id] == 0.0) {
      EXPECT_EQ(counts[id], 0) << what << ": id " << id << " is outside the candidates";
      continue;
    }
    const double sigma = std::sqrt(kDraws * p[id] * (1.0 - p[id]));
    EXPECT_NEAR(counts[id], kDraws * p[id], 5.0 * sigma + 1.0) << what << ": id " << id;
  }
}

TEST(Sampling, GreedyIsTheArgmaxWithTheLowestIdAmongTies) {
  std::vector<float> l = {0.5f, 2.0f, -1.0f, 2.0f};
  GenerateArgs args;
  args.temperature = 0.0f;
  EXPECT_EQ(sample_token(l.data(), 4, args, 0), 1);
  args.vocab_limit = 1;
  EXPECT_EQ(sample_token(l.data(), 4, args, 0), 0);
}

TEST(Sampling, FrequenciesMatchTheDistribution) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::vector<float> l = random_logits(12, seed);
  GenerateArgs args;
  args.seed = seed;
  args.temperature = 0.8f;
  args.top_k = 0;
  expect_frequencies_match(l, args, "every id");
  args.top_k = 5;
  expect_frequencies_match(l, args, "top_k 5");
  args.top_k = 0;
  args.top_p = 0.6f;
  expect_frequencies_match(l, args, "top_p 0.6");
  args.top_k = 7;
  args.top_p = 0.9f;
  args.temperature = 1.7f;
  expect_frequencies_match(l, args, "top_k 7, top_p 0.9");
}

TEST(Sampling, VocabLimitAndSeedsAreKept) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  std::vector<float> l = random_logits(40, seed);
  l[35] = 50.0f;  // beyond the limit: never drawn however likely
  GenerateArgs args;
  args.seed = seed;
  args.top_k = 0;
  args.vocab_limit = 30;
  for (int i = 0; i < 2000; ++i) {
    const std::int32_t token = sample_token(l.data(), 40, args, i);
    ASSERT_LT(token, 30);
    ASSERT_EQ(token, sample_token(l.data(), 40, args, i)) << "the same seed and index";
  }
  GenerateArgs other = args;
  other.seed = seed + 1;
  int differ = 0;
  for (int i = 0; i < 200; ++i) differ += sample_token(l.data(), 40, args, i) != sample_token(l.data(), 40, other, i);
  EXPECT_GT(differ, 0) << "another seed draws other tokens";
}

TEST(Sampling, LogProbabilityIsTheLogSoftmax) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::vector<float> l = random_logits(17, seed);
  double total = 0.0;
  for (float x : l) total += std::exp(static_cast<double>(x));
  for (std::int32_t id = 0; id < 17; ++id)
    EXPECT_NEAR(log_probability(l.data(), 17, id), l[id] - std::log(total), 1e-6) << "id " << id;
  const auto top = top_log_probabilities(l.data(), 17, 3);
  ASSERT_EQ(top.size(), 3u);
  EXPECT_EQ(top[0].first, std::max_element(l.begin(), l.end()) - l.begin());
  EXPECT_GE(top[0].second, top[1].second);
  EXPECT_GE(top[1].second, top[2].second);
}

}  // namespace
}  // namespace myriad::nn
