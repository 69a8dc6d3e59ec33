// Token sampling and log-probabilities (nn/sampling.h).
#include "myriad/nn/sampling.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "myriad/core/philox.h"
#include "myriad/nn/generate.h"

namespace myriad::nn {

namespace {

// log sum exp of the logits, and their maximum, in float64.
std::pair<double, double> log_normaliser(const float* l, std::int64_t V) {
  const double top = *std::max_element(l, l + V);
  double total = 0.0;
  for (std::int64_t i = 0; i < V; ++i) total += std::exp(static_cast<double>(l[i]) - top);
  return {top, std::log(total)};
}

}  // namespace

std::int32_t sample_token(const float* l, std::int64_t vocab, const GenerateArgs& args, std::uint64_t draw_index) {
  const std::int64_t V = args.vocab_limit > 0 ? std::min<std::int64_t>(args.vocab_limit, vocab) : vocab;
  if (args.temperature <= 0.0f) return static_cast<std::int32_t>(std::max_element(l, l + V) - l);
  if ((args.top_k <= 0 || args.top_k >= V) && args.top_p >= 1.0f) {  // every id: no order needed
    const double top = *std::max_element(l, l + V);
    std::vector<double> weights(V);
    double total = 0.0;
    for (std::int64_t i = 0; i < V; ++i)
      total += weights[i] = std::exp((static_cast<double>(l[i]) - top) / args.temperature);
    double u = static_cast<double>(philox_uniform(args.seed, 0, draw_index)) * total;
    for (std::int64_t i = 0; i < V; ++i) {
      if ((u -= weights[i]) < 0.0) return static_cast<std::int32_t>(i);
    }
    for (std::int64_t i = V - 1; i > 0; --i) {  // rounding left u past the end: the last id with weight
      if (weights[i] > 0.0) return static_cast<std::int32_t>(i);
    }
    return 0;
  }
  std::vector<std::int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::int64_t k = args.top_k > 0 ? std::min<std::int64_t>(args.top_k, V) : V;
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](std::int32_t a, std::int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  std::vector<double> weights(k);
  double total = 0.0;
  for (std::int64_t i = 0; i < k; ++i) {
    weights[i] = std::exp((static_cast<double>(l[order[i]]) - l[order[0]]) / args.temperature);
    total += weights[i];
  }
  if (args.top_p < 1.0f) {  // the nucleus: the shortest prefix holding top_p of the weight
    const double target = static_cast<double>(args.top_p) * total;
    double kept = 0.0;
    std::int64_t m = 0;
    while (m < k && kept < target) kept += weights[m++];
    k = std::max<std::int64_t>(m, 1);
    total = kept > 0.0 ? kept : weights[0];
  }
  double u = static_cast<double>(philox_uniform(args.seed, 0, draw_index)) * total;
  for (std::int64_t i = 0; i < k; ++i) {
    if ((u -= weights[i]) < 0.0) return order[i];
  }
  return order[k - 1];
}

float log_probability(const float* l, std::int64_t vocab, std::int32_t token) {
  const auto [top, log_total] = log_normaliser(l, vocab);
  return static_cast<float>(static_cast<double>(l[token]) - top - log_total);
}

std::vector<std::pair<std::int32_t, float>> top_log_probabilities(const float* l, std::int64_t vocab,
                                                                  std::int64_t count) {
  const auto [top, log_total] = log_normaliser(l, vocab);
  const std::int64_t k = std::clamp<std::int64_t>(count, 0, vocab);
  std::vector<std::int32_t> order(vocab);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](std::int32_t a, std::int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  std::vector<std::pair<std::int32_t, float>> out;
  for (std::int64_t i = 0; i < k; ++i)
    out.emplace_back(order[i], static_cast<float>(static_cast<double>(l[order[i]]) - top - log_total));
  return out;
}

}  // namespace myriad::nn
