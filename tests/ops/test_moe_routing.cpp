// MoE routing ops (ops/moe_routing.h) on the CPU: deterministic top-k with ties, the per-sequence
// capacity policy (exactly the named assignments dropped and counted), rows in expert order in
// both layouts, the load-balancing and z losses against a float64 recomputation written here, and
// route_tokens_backward against central differences of the objective it differentiates; under
// context parallelism, every cp rank's routing of its two chunks (from the all-gathered choice
// counts) equals the whole sequences' routing of those tokens, totals summed over the ranks.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>

#include "myriad/ops/moe_routing.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

enum class RouterScore { softmax, sigmoid };

// The routing's spec as the tests write it: E experts, top k, capacity (-1 dropless).
struct MoeSpec {
  std::int64_t num_experts = 0, top_k = 1, capacity = -1;
  RouterScore score = RouterScore::softmax;
  bool normalize_top_k = true, padded = false;
};

MoeSpec spec(int experts, int k) { return MoeSpec{.num_experts = experts, .top_k = k}; }

RouteArgs route_args(const MoeSpec& s, std::int64_t T) {
  return RouteArgs{.top_k = s.top_k,
                   .seq_len = T,
                   .capacity = s.capacity,
                   .sigmoid = s.score == RouterScore::sigmoid,
                   .normalize_top_k = s.normalize_top_k,
                   .padded = s.padded};
}

// route_tokens' outputs as host vectors (the old plan's view).
struct RoutingPlan {
  std::vector<std::int32_t> expert, slot, source;
  std::vector<float> weight;
  std::vector<std::int64_t> counts, offsets, routed;
  std::int64_t dropped = 0;
  double aux_loss_sum = 0.0, z_loss_sum = 0.0;
  std::int64_t rows() const { return offsets.back(); }
};

template <typename T>
std::vector<T> values(const Tensor& t) {
  return std::vector<T>(t.data<T>(), t.data<T>() + t.numel());
}

RoutingPlan plan_routing(const float* logits, std::int64_t N, std::int64_t E, std::int64_t T, const MoeSpec& s) {
  const RouteArgs args = route_args(s, T);
  Tensor l = Tensor::empty({N, E});
  std::copy(logits, logits + N * E, l.data<float>());
  const std::int64_t k = s.top_k;
  RoutedTokens out{.expert = Tensor::empty({N, k}, DType::i32),
                   .weight = Tensor::empty({N, k}),
                   .slot = Tensor::empty({N, k}, DType::i32),
                   .source = Tensor::empty({routed_rows(args, N, E)}, DType::i32),
                   .counts = Tensor::empty({E}, DType::i64),
                   .totals = Tensor::zeros({E + 3}, DType::f64)};
  route_tokens(args, l, out);
  RoutingPlan plan{.expert = values<std::int32_t>(out.expert),
                   .slot = values<std::int32_t>(out.slot),
                   .source = values<std::int32_t>(out.source),
                   .weight = values<float>(out.weight),
                   .counts = values<std::int64_t>(out.counts)};
  const std::vector<double> totals = values<double>(out.totals);
  plan.offsets.assign(E + 1, 0);
  for (std::int64_t e = 0; e < E; ++e) plan.offsets[e + 1] = plan.offsets[e] + plan.counts[e];
  if (!s.padded) plan.source.resize(static_cast<std::size_t>(plan.rows()));
  for (std::int64_t e = 0; e < E; ++e) plan.routed.push_back(static_cast<std::int64_t>(totals[e]));
  plan.dropped = static_cast<std::int64_t>(totals[E]);
  plan.aux_loss_sum = totals[E + 1];
  plan.z_loss_sum = totals[E + 2];
  return plan;
}

void routing_backward(const RoutingPlan& plan, const float* logits, const float* d_weight, double aux_scale,
                      double z_scale, std::int64_t N, std::int64_t E, std::int64_t T, const MoeSpec& s,
                      float* d_logits) {
  const std::int64_t k = s.top_k;
  Tensor l = Tensor::empty({N, E}), expert = Tensor::empty({N, k}, DType::i32), g = Tensor::empty({N, k});
  std::copy(logits, logits + N * E, l.data<float>());
  std::copy(plan.expert.begin(), plan.expert.end(), expert.data<std::int32_t>());
  std::copy(d_weight, d_weight + N * k, g.data<float>());
  Tensor out = Tensor::empty({N, E});
  route_tokens_backward(route_args(s, T), l, expert, g, aux_scale, z_scale, out);
  std::copy(out.data<float>(), out.data<float>() + N * E, d_logits);
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
  s.capacity = 2;
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
  // Dropless keeps all.
  s.capacity = -1;
  EXPECT_EQ(plan_routing(logits.data(), 8, 3, 4, s).dropped, 0);
}

TEST(MoeRouting, RowsAreTheKeptAssignmentsInExpertThenTokenOrder) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t N = 24, E = 5, T = 6;
  std::vector<float> logits = random_logits(N * E, seed, 1);
  MoeSpec s = spec(E, 2);
  s.capacity = 2;
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
      routing_backward(plan, logits.data(), d_weight_f.data(), aux_scale, z_scale, N, E, T, s, analytic.data());
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

// A staged scale (one f32 element, read when the op runs) multiplies both loss scales: the gradient
// equals the one computed with the scales multiplied beforehand in float64, bit for bit; a scale
// of another shape is refused by name.
TEST(MoeRouting, AStagedScaleMultipliesBothLossScales) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t N = 8, E = 5, T = 4, k = 2;
  const MoeSpec s = spec(E, k);
  const std::vector<float> logits = random_logits(N * E, seed, 1);
  const RoutingPlan plan = plan_routing(logits.data(), N, E, T, s);
  Tensor l = Tensor::empty({N, E}), expert = Tensor::empty({N, k}, DType::i32);
  std::copy(logits.begin(), logits.end(), l.data<float>());
  std::copy(plan.expert.begin(), plan.expert.end(), expert.data<std::int32_t>());
  const Tensor g = testing::random_tensor({N, k}, seed, 2);
  const float staged = static_cast<float>(testing::to_f64(testing::random_tensor({1}, seed, 3, 0.5f, 3.0f))[0]);
  Tensor scale = Tensor::empty({1});
  scale.data<float>()[0] = staged;
  const double aux = 0.7, z = 0.3;
  Tensor want = Tensor::empty({N, E}), got = Tensor::empty({N, E});
  route_tokens_backward(route_args(s, T), l, expert, g, aux * staged, z * staged, want);
  route_tokens_backward(route_args(s, T), l, expert, g, aux, z, got, Tensor(), scale);
  EXPECT_EQ(values<float>(got), values<float>(want));
  Tensor unscaled = Tensor::empty({N, E});
  route_tokens_backward(route_args(s, T), l, expert, g, aux, z, unscaled);
  EXPECT_NE(values<float>(unscaled), values<float>(want)) << "the scale changed nothing";
  Tensor two = Tensor::empty({2});
  testing::expect_error_naming(
      [&] { route_tokens_backward(route_args(s, T), l, expert, g, aux, z, got, Tensor(), two); },
      {"route_tokens_backward", "'scale'"});
}

TEST(MoeRouting, NonFiniteLogitsRouteDeterministicallyAndPartialSequencesAreRefused) {
  // A NaN logit does not stop the op (a device could not say so without waiting): its token still
  // picks in-range experts, a NaN score counting as the lowest, and the non-finite values flow on
  // into the weights (softmax: every score of the token is NaN) for the step's check to see.
  std::vector<float> logits(4 * 3, 0.0f);
  logits[3 + 0] = NAN;
  logits[3 + 2] = 1.0f;
  RoutingPlan soft = plan_routing(logits.data(), 4, 3, 2, spec(3, 2));
  EXPECT_EQ(soft.expert[2], 0);
  EXPECT_EQ(soft.expert[3], 1);
  EXPECT_TRUE(std::isnan(soft.weight[2]));
  MoeSpec sigmoid = spec(3, 2);
  sigmoid.score = RouterScore::sigmoid;
  RoutingPlan sig = plan_routing(logits.data(), 4, 3, 2, sigmoid);
  EXPECT_EQ(sig.expert[2], 2);  // the NaN expert is never preferred
  EXPECT_EQ(sig.expert[3], 1);
  EXPECT_TRUE(std::isfinite(sig.weight[2]));
  logits[3] = 0.0f;
  testing::expect_error_naming([&] { plan_routing(logits.data(), 4, 3, 3, spec(3, 1)); },
                               {"route_tokens", "4 tokens", "T = 3"});
  testing::expect_error_naming([&] { plan_routing(logits.data(), 4, 3, 2, spec(3, 4)); }, {"route_tokens", "top_k 4"});
  MoeSpec padded_dropless = spec(3, 1);
  padded_dropless.padded = true;
  testing::expect_error_naming([&] { plan_routing(logits.data(), 4, 3, 2, padded_dropless); }, {"padded", "capacity"});
}

TEST(MoeRouting, PaddedRowsAreTheCompactRowsInFixedExpertBlocks) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t N = 24, E = 5, T = 6, k = 2;
  std::vector<float> logits = random_logits(N * E, seed, 3);
  for (std::int64_t capacity : {0, 1, 2, 9}) {
    SCOPED_TRACE(capacity);
    MoeSpec s = spec(E, k);
    s.capacity = capacity;
    const RoutingPlan compact = plan_routing(logits.data(), N, E, T, s);
    s.padded = true;
    const RoutingPlan padded = plan_routing(logits.data(), N, E, T, s);
    const std::int64_t M = N / T * std::min(capacity, T);
    ASSERT_EQ(static_cast<std::int64_t>(padded.source.size()), E * M);
    EXPECT_EQ(padded.counts, compact.counts);
    EXPECT_EQ(padded.expert, compact.expert);
    EXPECT_EQ(padded.weight, compact.weight);
    EXPECT_EQ(padded.dropped, compact.dropped);
    EXPECT_EQ(padded.aux_loss_sum, compact.aux_loss_sum);
    for (std::int64_t a = 0; a < N * k; ++a) {
      const std::int32_t row = compact.slot[a];
      if (row < 0) {
        EXPECT_EQ(padded.slot[a], -1);
        continue;
      }
      const std::int64_t e = compact.expert[a];
      EXPECT_EQ(padded.slot[a], e * M + (row - compact.offsets[e])) << "assignment " << a;
    }
    for (std::int64_t e = 0; e < E; ++e) {
      for (std::int64_t i = 0; i < M; ++i) {
        const std::int32_t want = i < compact.counts[e] ? compact.source[compact.offsets[e] + i] : -1;
        EXPECT_EQ(padded.source[e * M + i], want) << "expert " << e << " row " << i;
      }
    }
  }
}

TEST(MoeRouting, TotalsAreAddedToAndLeftAloneWhenUndefined) {
  const std::int64_t N = 4, E = 3, T = 2;
  std::vector<float> logits(N * E, 0.0f);
  Tensor l = Tensor::empty({N, E});
  std::copy(logits.begin(), logits.end(), l.data<float>());
  const RouteArgs args{.top_k = 1, .seq_len = T};
  RoutedTokens out{.expert = Tensor::empty({N, 1}, DType::i32),
                   .weight = Tensor::empty({N, 1}),
                   .slot = Tensor::empty({N, 1}, DType::i32),
                   .source = Tensor::empty({N}, DType::i32),
                   .counts = Tensor::empty({E}, DType::i64),
                   .totals = Tensor::zeros({E + 3}, DType::f64)};
  route_tokens(args, l, out);
  route_tokens(args, l, out);
  EXPECT_EQ(out.totals.data<double>()[0], 2.0 * N);                     // every token to expert 0, twice
  EXPECT_NEAR(out.totals.data<double>()[E + 1], 2.0 * (N / T), 1e-12);  // aux = 1 per sequence
  out.totals = Tensor();
  route_tokens(args, l, out);  // nothing to add to: fine
  EXPECT_EQ(out.counts.data<std::int64_t>()[0], N);
}

// Context parallelism: B sequences of Tg tokens routed whole, and routed by cp simulated ranks
// each holding chunks r and 2 cp - 1 - r of every sequence (count_route_choices, the counts
// gathered, route_tokens with them). Per token the same experts, weights, drops and gradient
// (bit for bit: the same float64 arithmetic on the same integers); each rank's rows name its
// kept assignments; totals summed over the ranks equal the whole's.
TEST(MoeRouting, ContextParallelRanksRouteAsTheWholeSequences) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t B = 2, Tg = 16, E = 5, k = 2, N = B * Tg;
  int case_index = 0;
  for (std::int64_t cp : {2, 4}) {
    for (std::int64_t capacity : {-1, 4, 0}) {
      for (bool sigmoid : {false, true}) {
        for (bool padded : {false, true}) {
          if (padded && capacity < 0) continue;
          SCOPED_TRACE(::testing::Message() << "cp " << cp << " capacity " << capacity << (sigmoid ? " sigmoid" : "")
                                            << (padded ? " padded" : ""));
          const RouteArgs whole_args{
              .top_k = k, .seq_len = Tg, .capacity = capacity, .sigmoid = sigmoid, .padded = padded};
          Tensor logits = testing::random_tensor({N, E}, seed, 40 + case_index, -2.0f, 2.0f);
          const Tensor grad_weight = testing::random_tensor({N, k}, seed, 60 + case_index);
          ++case_index;
          auto outputs = [&](const RouteArgs& args, std::int64_t n) {
            return RoutedTokens{.expert = Tensor::empty({n, k}, DType::i32),
                                .weight = Tensor::empty({n, k}),
                                .slot = Tensor::empty({n, k}, DType::i32),
                                .source = Tensor::empty({routed_rows(args, n, E)}, DType::i32),
                                .counts = Tensor::empty({E}, DType::i64),
                                .totals = Tensor::zeros({E + 3}, DType::f64)};
          };
          RoutedTokens whole = outputs(whole_args, N);
          route_tokens(whole_args, logits, whole);
          Tensor whole_grad = Tensor::empty({N, E});
          route_tokens_backward(whole_args, logits, whole.expert, grad_weight, 0.7, 0.3, whole_grad);
          // The global token of local token (b, row) on rank r.
          const std::int64_t T = Tg / cp, c = T / 2;
          auto global = [&](std::int64_t r, std::int64_t local) {
            const std::int64_t b = local / T, row = local % T, half = row / c;
            return b * Tg + (half == 0 ? r : 2 * cp - 1 - r) * c + row % c;
          };
          std::vector<RouteArgs> args(cp);
          std::vector<Tensor> local_logits(cp), local_grad_weight(cp);
          Tensor context = Tensor::empty({cp, B, 2, E}, DType::i64);
          for (std::int64_t r = 0; r < cp; ++r) {
            args[r] = RouteArgs{.top_k = k,
                                .seq_len = T,
                                .capacity = capacity,
                                .sigmoid = sigmoid,
                                .padded = padded,
                                .context_ranks = cp,
                                .context_rank = r};
            local_logits[r] = Tensor::empty({B * T, E});
            local_grad_weight[r] = Tensor::empty({B * T, k});
            for (std::int64_t t = 0; t < B * T; ++t) {
              local_logits[r].slice(0, t, t + 1).copy_from(logits.slice(0, global(r, t), global(r, t) + 1));
              local_grad_weight[r].slice(0, t, t + 1).copy_from(grad_weight.slice(0, global(r, t), global(r, t) + 1));
            }
            Tensor mine = context.slice(0, r, r + 1).view({B, 2, E});
            count_route_choices(args[r], local_logits[r], mine);
          }
          std::vector<double> summed(static_cast<std::size_t>(E + 3), 0.0);
          for (std::int64_t r = 0; r < cp; ++r) {
            RoutedTokens part = outputs(args[r], B * T);
            route_tokens(args[r], local_logits[r], part, context);
            Tensor grad = Tensor::empty({B * T, E});
            route_tokens_backward(args[r], local_logits[r], part.expert, local_grad_weight[r], 0.7, 0.3, grad, context);
            for (std::int64_t t = 0; t < B * T; ++t) {
              const std::int64_t g = global(r, t);
              for (std::int64_t j = 0; j < k; ++j) {
                EXPECT_EQ(part.expert.data<std::int32_t>()[t * k + j], whole.expert.data<std::int32_t>()[g * k + j]);
                EXPECT_EQ(part.weight.data<float>()[t * k + j], whole.weight.data<float>()[g * k + j]);
                const std::int32_t slot = part.slot.data<std::int32_t>()[t * k + j];
                EXPECT_EQ(slot < 0, whole.slot.data<std::int32_t>()[g * k + j] < 0) << "rank " << r << " token " << t;
                if (slot >= 0) EXPECT_EQ(part.source.data<std::int32_t>()[slot], t);
              }
              for (std::int64_t e = 0; e < E; ++e)
                EXPECT_EQ(grad.data<float>()[t * E + e], whole_grad.data<float>()[g * E + e]) << "rank " << r;
            }
            for (std::int64_t i = 0; i < E + 3; ++i) summed[i] += part.totals.data<double>()[i];
          }
          for (std::int64_t i = 0; i < E + 3; ++i)
            EXPECT_NEAR(summed[i], whole.totals.data<double>()[i], 1e-12 * (1.0 + std::abs(summed[i]))) << i;
          // A context whose own row is not these logits' choices is refused by name.
          RoutedTokens part = outputs(args[0], B * T);
          context.data<std::int64_t>()[0] += 1;
          EXPECT_THROW(
              {
                try {
                  route_tokens(args[0], local_logits[0], part, context);
                } catch (const Error& e) {
                  EXPECT_NE(std::string(e.what()).find("count_route_choices"), std::string::npos) << e.what();
                  throw;
                }
              },
              Error);
          EXPECT_THROW(route_tokens(args[0], local_logits[0], part), Error);  // cp without the counts
        }
      }
    }
  }
}

}  // namespace
}  // namespace myriad
