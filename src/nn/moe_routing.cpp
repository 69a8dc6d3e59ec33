// MoE routing on the host: scores, deterministic top-k, per-sequence capacity, expert-ordered rows,
// the load-balancing and z losses and their gradient (nn/moe_routing.h). Sums in double.
#include "myriad/nn/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "myriad/core/error.h"

namespace myriad::nn {

namespace {

// p (the aux loss's per-token distribution) from the scores: softmax scores as they are,
// sigmoid scores normalised to sum 1.
void balance_probs(const double* s, std::int64_t E, RouterScore score, double* p) {
  if (score == RouterScore::softmax) {
    std::copy(s, s + E, p);
    return;
  }
  double sum = 0.0;
  for (std::int64_t e = 0; e < E; ++e) sum += s[e];
  for (std::int64_t e = 0; e < E; ++e) p[e] = s[e] / sum;
}

}  // namespace

RoutingPlan plan_routing(const float* logits, std::int64_t N, std::int64_t E, std::int64_t T, const MoeSpec& spec) {
  MYRIAD_CHECK(T > 0 && N % T == 0, "moe routing: " << N << " tokens are not whole sequences of T = " << T);
  const std::int64_t k = spec.top_k;
  MYRIAD_CHECK(k >= 1 && k <= E, "moe routing: top_k " << k << " must lie in [1, " << E << "]");
  RoutingPlan plan;
  plan.tokens = N;
  plan.experts = E;
  plan.top_k = k;
  plan.seq_len = T;
  plan.scores.resize(static_cast<std::size_t>(N * E));
  plan.lse.resize(static_cast<std::size_t>(N));
  plan.expert.resize(static_cast<std::size_t>(N * k));
  plan.weight.resize(static_cast<std::size_t>(N * k));
  plan.slot.assign(static_cast<std::size_t>(N * k), -1);
  plan.routed.assign(static_cast<std::size_t>(E), 0);
  std::vector<int> order(static_cast<std::size_t>(E));
  for (std::int64_t t = 0; t < N; ++t) {
    const float* l = logits + t * E;
    double* s = plan.scores.data() + t * E;
    double max = -INFINITY;
    for (std::int64_t e = 0; e < E; ++e) {
      MYRIAD_CHECK(std::isfinite(l[e]),
                   "moe routing: router logit of token " << t << ", expert " << e << " is " << l[e]);
      max = std::max(max, static_cast<double>(l[e]));
    }
    double sum = 0.0;
    for (std::int64_t e = 0; e < E; ++e) sum += std::exp(static_cast<double>(l[e]) - max);
    plan.lse[t] = max + std::log(sum);
    plan.z_loss_sum += plan.lse[t] * plan.lse[t];
    for (std::int64_t e = 0; e < E; ++e) {
      s[e] = spec.score == RouterScore::softmax ? std::exp(static_cast<double>(l[e]) - plan.lse[t])
                                                : 1.0 / (1.0 + std::exp(-static_cast<double>(l[e])));
    }
    std::iota(order.begin(), order.end(), 0);
    std::partial_sort(order.begin(), order.begin() + k, order.end(),
                      [s](int a, int b) { return s[a] > s[b] || (s[a] == s[b] && a < b); });
    double chosen = 0.0;
    for (std::int64_t j = 0; j < k; ++j) chosen += s[order[j]];
    for (std::int64_t j = 0; j < k; ++j) {
      plan.expert[t * k + j] = order[j];
      plan.weight[t * k + j] = static_cast<float>(spec.normalize_top_k ? s[order[j]] / chosen : s[order[j]]);
      ++plan.routed[order[j]];
    }
  }
  // Capacity per sequence, granted in token order; then rows in expert order.
  const std::int64_t capacity = spec.capacity(T);
  std::vector<std::int64_t> kept(static_cast<std::size_t>(E), 0), taken(static_cast<std::size_t>(E));
  std::vector<char> keep(static_cast<std::size_t>(N * k), 0);
  for (std::int64_t first = 0; first < N; first += T) {
    std::fill(taken.begin(), taken.end(), 0);
    for (std::int64_t a = first * k; a < (first + T) * k; ++a) {
      const int e = plan.expert[a];
      if (capacity >= 0 && taken[e] >= capacity) {
        ++plan.dropped;
        continue;
      }
      ++taken[e];
      ++kept[e];
      keep[a] = 1;
    }
  }
  plan.offsets.assign(static_cast<std::size_t>(E + 1), 0);
  for (std::int64_t e = 0; e < E; ++e) plan.offsets[e + 1] = plan.offsets[e] + kept[e];
  plan.source.resize(static_cast<std::size_t>(plan.offsets[E]));
  std::vector<std::int64_t> cursor(plan.offsets.begin(), plan.offsets.end() - 1);
  for (std::int64_t a = 0; a < N * k; ++a) {
    if (!keep[a]) continue;
    const std::int64_t row = cursor[plan.expert[a]]++;
    plan.slot[a] = static_cast<std::int32_t>(row);
    plan.source[row] = static_cast<std::int32_t>(a / k);
  }
  // Load balance per sequence.
  std::vector<double> f(static_cast<std::size_t>(E)), P(static_cast<std::size_t>(E)), p(static_cast<std::size_t>(E));
  for (std::int64_t first = 0; first < N; first += T) {
    std::fill(f.begin(), f.end(), 0.0);
    std::fill(P.begin(), P.end(), 0.0);
    for (std::int64_t t = first; t < first + T; ++t) {
      for (std::int64_t j = 0; j < k; ++j) f[plan.expert[t * k + j]] += 1.0 / static_cast<double>(T * k);
      balance_probs(plan.scores.data() + t * E, E, spec.score, p.data());
      for (std::int64_t e = 0; e < E; ++e) P[e] += p[e] / static_cast<double>(T);
    }
    double aux = 0.0;
    for (std::int64_t e = 0; e < E; ++e) aux += f[e] * P[e];
    plan.aux_loss_sum += static_cast<double>(E) * aux;
  }
  return plan;
}

void routing_backward(const RoutingPlan& plan, const float* logits, const float* d_weight, double aux_scale,
                      double z_scale, const MoeSpec& spec, float* d_logits) {
  const std::int64_t N = plan.tokens, E = plan.experts, k = plan.top_k, T = plan.seq_len;
  std::vector<double> f(static_cast<std::size_t>(E)), ds(static_cast<std::size_t>(E)), p(static_cast<std::size_t>(E));
  for (std::int64_t first = 0; first < N; first += T) {
    std::fill(f.begin(), f.end(), 0.0);
    for (std::int64_t t = first; t < first + T; ++t) {
      for (std::int64_t j = 0; j < k; ++j) f[plan.expert[t * k + j]] += 1.0 / static_cast<double>(T * k);
    }
    for (std::int64_t t = first; t < first + T; ++t) {
      const double* s = plan.scores.data() + t * E;
      std::fill(ds.begin(), ds.end(), 0.0);
      // Combine weights: w_j = s_j (/ Z, Z = sum of the chosen scores).
      double Z = 0.0, gw = 0.0;
      for (std::int64_t j = 0; j < k; ++j) Z += s[plan.expert[t * k + j]];
      for (std::int64_t j = 0; j < k; ++j) gw += static_cast<double>(d_weight[t * k + j]) * plan.weight[t * k + j];
      for (std::int64_t j = 0; j < k; ++j) {
        const double g = d_weight[t * k + j];
        ds[plan.expert[t * k + j]] += spec.normalize_top_k ? (g - gw) / Z : g;
      }
      // Load balance: d aux_s / d p_e = E f_e / T, through p's normalisation for sigmoid scores.
      double dp_dot_p = 0.0, sum_s = 0.0;
      balance_probs(s, E, spec.score, p.data());
      for (std::int64_t e = 0; e < E; ++e) {
        dp_dot_p += aux_scale * static_cast<double>(E) * f[e] / static_cast<double>(T) * p[e];
        sum_s += s[e];
      }
      for (std::int64_t e = 0; e < E; ++e) {
        const double dp = aux_scale * static_cast<double>(E) * f[e] / static_cast<double>(T);
        ds[e] += spec.score == RouterScore::softmax ? dp : (dp - dp_dot_p) / sum_s;
      }
      // Scores -> logits; then the z-loss: d z_t / d logit = 2 lse softmax(logits).
      float* dl = d_logits + t * E;
      if (spec.score == RouterScore::softmax) {
        double dot = 0.0;
        for (std::int64_t e = 0; e < E; ++e) dot += ds[e] * s[e];
        for (std::int64_t e = 0; e < E; ++e) dl[e] = static_cast<float>(s[e] * (ds[e] - dot));
      } else {
        for (std::int64_t e = 0; e < E; ++e) dl[e] = static_cast<float>(ds[e] * s[e] * (1.0 - s[e]));
      }
      if (z_scale != 0.0) {
        const float* l = logits + t * E;
        for (std::int64_t e = 0; e < E; ++e) {
          const double softmax = std::exp(static_cast<double>(l[e]) - plan.lse[t]);
          dl[e] += static_cast<float>(z_scale * 2.0 * plan.lse[t] * softmax);
        }
      }
    }
  }
}

}  // namespace myriad::nn
