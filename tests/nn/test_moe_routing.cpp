// MoE routing (nn/moe_routing.h): deterministic top-k with ties, the per-sequence capacity policy
// (exactly the named assignments dropped and counted), rows in expert order, the load-balancing
// and z losses against a float64 recomputation written here, and routing_backward against
// central differences of the objective it differentiates.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "myriad/nn/moe_routing.h"
#include "reference.h"

namespace myriad::nn {
namespace {

MoeSpec spec(int experts, int k) {
  MoeSpec s;
  s.num_experts = experts;
  s.top_k = k;
  return s;
}

std::vector<float> random_logits(std::int64_t n, std::uint64_t seed, std::uint64_t stream, float scale = 2.0f) {
  std::vector<double> v = testing::to_f64(testing::random_tensor({n}, seed, stream, -scale, scale));
  return std::vector<float>(v.begin(), v.end());
}

TEST(MoeRouting, EqualScoresGoToTheLowerExpertIndex) {
  const std::vector<float> logits(3 * 6, 0.5f);
  for (RouterScore score : {RouterScore::softmax, RouterScore::sigmoid}) {
    MoeSpec s = spec(6, 3);
    s.score = score;
    RoutingPlan plan = plan_routing(logits.data(), 3, 6, 3, s);
    for (int t = 0; t < 3; ++t) {
      EXPECT_EQ(plan.expert[t * 3 + 0], 0);
      EXPECT_EQ(plan.expert[t * 3 + 1], 1);
      EXPECT_EQ(plan.expert[t * 3 + 2], 2);
      EXPECT_FLOAT_EQ(plan.weight[t * 3], 1.0f / 3.0f);  // normalised
    }
  }
}

TEST(MoeRouting, CapacityDropsTheLaterTokensOfASequenceAndCountsThem) {
  // 2 sequences of 4 tokens, 3 experts, top 1, capacity 2: every token prefers expert 0 except
  // token 2 of sequence 0 (expert 2). Sequence 0: tokens 0, 1 take expert 0, token 3 is dropped;
  // sequence 1: tokens 4, 5 take it, 6 and 7 are dropped.
  std::vector<float> logits(8 * 3, 0.0f);
  for (int t = 0; t < 8; ++t) logits[t * 3 + (t == 2 ? 2 : 0)] = 3.0f;
  MoeSpec s = spec(3, 1);
  s.expert_capacity = 2;
  RoutingPlan plan = plan_routing(logits.data(), 8, 3, 4, s);
  EXPECT_EQ(plan.dropped, 3);
  const std::vector<std::int32_t> kept_slot = {0, 1, 4, -1, 2, 3, -1, -1};
  EXPECT_EQ(plan.slot, kept_slot);
  EXPECT_EQ(plan.offsets, (std::vector<std::int64_t>{0, 4, 4, 5}));
  EXPECT_EQ(plan.source, (std::vector<std::int32_t>{0, 1, 4, 5, 2}));
  EXPECT_EQ(plan.routed, (std::vector<std::int64_t>{7, 0, 1}));
  // The same sequences routed in another batch (alone) drop the same tokens: per-sequence capacity.
  RoutingPlan second = plan_routing(logits.data() + 4 * 3, 4, 3, 4, s);
  EXPECT_EQ(second.dropped, 2);
  EXPECT_EQ(second.slot, (std::vector<std::int32_t>{0, 1, -1, -1}));
  // Dropless keeps all, and capacity_factor sizes it: ceil(1.0 * 4 * 1 / 3) = 2.
  s.expert_capacity = 0;
  EXPECT_EQ(plan_routing(logits.data(), 8, 3, 4, s).dropped, 0);
  s.capacity_factor = 1.0;
  EXPECT_EQ(s.capacity(4), 2);
  EXPECT_EQ(plan_routing(logits.data(), 8, 3, 4, s).dropped, 3);
}

TEST(MoeRouting, RowsAreTheKeptAssignmentsInExpertThenTokenOrder) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t N = 24, E = 5, T = 6;
  std::vector<float> logits = random_logits(N * E, seed, 1);
  MoeSpec s = spec(E, 2);
  s.expert_capacity = 2;
  RoutingPlan plan = plan_routing(logits.data(), N, E, T, s);
  std::int64_t kept = 0;
  for (std::int64_t a = 0; a < N * 2; ++a) {
    const std::int32_t row = plan.slot[a];
    if (row < 0) continue;
    ++kept;
    EXPECT_EQ(plan.source[row], a / 2);
    EXPECT_GE(row, plan.offsets[plan.expert[a]]);
    EXPECT_LT(row, plan.offsets[plan.expert[a] + 1]);
  }
  EXPECT_EQ(kept + plan.dropped, N * 2);
  EXPECT_EQ(kept, plan.rows());
  for (std::int64_t e = 0; e < E; ++e) {
    EXPECT_LE(plan.offsets[e + 1] - plan.offsets[e], 2 * (N / T));  // capacity per sequence
    for (std::int64_t r = plan.offsets[e] + 1; r < plan.offsets[e + 1]; ++r)
      EXPECT_LT(plan.source[r - 1], plan.source[r]);
  }
}

// The objective routing_backward differentiates, recomputed in float64 here from the definitions.
double objective(const std::vector<float>& logits, std::int64_t N, std::int64_t E, std::int64_t T, const MoeSpec& s,
                 const RoutingPlan& fixed, const std::vector<double>& d_weight, double aux_scale, double z_scale) {
  const int k = s.top_k;
  double total = 0.0;
  for (std::int64_t first = 0; first < N; first += T) {
    std::vector<double> f(E, 0.0), P(E, 0.0);
    for (std::int64_t t = first; t < first + T; ++t) {
      std::vector<double> score(E), p(E);
      double max = -1e300, sum = 0.0;
      for (std::int64_t e = 0; e < E; ++e) max = std::max(max, static_cast<double>(logits[t * E + e]));
      for (std::int64_t e = 0; e < E; ++e) sum += std::exp(logits[t * E + e] - max);
      const double lse = max + std::log(sum);
      total += z_scale * lse * lse;
      double score_sum = 0.0;
      for (std::int64_t e = 0; e < E; ++e) {
        score[e] = s.score == RouterScore::softmax ? std::exp(logits[t * E + e] - lse)
                                                   : 1.0 / (1.0 + std::exp(-static_cast<double>(logits[t * E + e])));
        score_sum += score[e];
      }
      for (std::int64_t e = 0; e < E; ++e)
        P[e] += (s.score == RouterScore::softmax ? score[e] : score[e] / score_sum) / T;
      double chosen = 0.0;
      for (int j = 0; j < k; ++j) chosen += score[fixed.expert[t * k + j]];
      for (int j = 0; j < k; ++j) {
        const double w = score[fixed.expert[t * k + j]] / (s.normalize_top_k ? chosen : 1.0);
        total += d_weight[t * k + j] * w;
        f[fixed.expert[t * k + j]] += 1.0 / static_cast<double>(T * k);
      }
    }
    double aux = 0.0;
    for (std::int64_t e = 0; e < E; ++e) aux += f[e] * P[e];
    total += aux_scale * static_cast<double>(E) * aux;
  }
  return total;
}

TEST(MoeRouting, LossesMatchAFloat64Recomputation) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t N = 12, E = 6, T = 4;
  for (RouterScore score : {RouterScore::softmax, RouterScore::sigmoid}) {
    MoeSpec s = spec(E, 3);
    s.score = score;
    std::vector<float> logits = random_logits(N * E, seed, 2);
    RoutingPlan plan = plan_routing(logits.data(), N, E, T, s);
    const std::vector<double> none(N * 3, 0.0);
    EXPECT_NEAR(plan.aux_loss_sum, objective(logits, N, E, T, s, plan, none, 1.0, 0.0), 1e-12);
    EXPECT_NEAR(plan.z_loss_sum, objective(logits, N, E, T, s, plan, none, 0.0, 1.0), 1e-9);
    // Uniform scores: every token takes expert 0 (ties), f = (1, 0, ...), P = 1/E: aux = 1 per sequence.
    std::vector<float> flat(N * E, 0.0f);
    RoutingPlan uniform = plan_routing(flat.data(), N, E, T, spec(E, 1));
    const std::int64_t sequences = N / T;  // T divides N
    EXPECT_NEAR(uniform.aux_loss_sum, static_cast<double>(sequences), 1e-12);
  }
}

TEST(MoeRouting, BackwardMatchesCentralDifferences) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t N = 8, E = 5, T = 4;
  int case_index = 0;
  for (RouterScore score : {RouterScore::softmax, RouterScore::sigmoid}) {
    for (bool normalize : {true, false}) {
      SCOPED_TRACE(case_index);
      MoeSpec s = spec(E, 2);
      s.score = score;
      s.normalize_top_k = normalize;
      std::vector<float> logits = random_logits(N * E, seed, 10 + case_index);
      std::vector<double> d_weight = testing::to_f64(testing::random_tensor({N * 2}, seed, 20 + case_index));
      std::vector<float> d_weight_f(d_weight.begin(), d_weight.end());
      d_weight.assign(d_weight_f.begin(), d_weight_f.end());
      const double aux_scale = 0.7, z_scale = 0.3;
      RoutingPlan plan = plan_routing(logits.data(), N, E, T, s);
      std::vector<float> analytic(N * E);
      routing_backward(plan, logits.data(), d_weight_f.data(), aux_scale, z_scale, s, analytic.data());
      // Central differences in float64 through the float logits, the choice held fixed.
      for (std::int64_t i = 0; i < N * E; ++i) {
        const double eps = 1e-3;
        std::vector<float> up = logits, down = logits;
        up[i] += static_cast<float>(eps);
        down[i] -= static_cast<float>(eps);
        const double h = static_cast<double>(up[i]) - static_cast<double>(down[i]);
        const double numeric = (objective(up, N, E, T, s, plan, d_weight, aux_scale, z_scale) -
                                objective(down, N, E, T, s, plan, d_weight, aux_scale, z_scale)) /
                               h;
        EXPECT_NEAR(analytic[i], numeric, 1e-4 + 1e-3 * std::fabs(numeric)) << "logit " << i;
      }
      ++case_index;
    }
  }
}

TEST(MoeRouting, RefusesNonFiniteLogitsAndPartialSequences) {
  std::vector<float> logits(4 * 3, 0.0f);
  logits[5] = NAN;
  EXPECT_THROW(plan_routing(logits.data(), 4, 3, 2, spec(3, 1)), Error);
  logits[5] = 0.0f;
  EXPECT_THROW(plan_routing(logits.data(), 4, 3, 3, spec(3, 1)), Error);
}

}  // namespace
}  // namespace myriad::nn
