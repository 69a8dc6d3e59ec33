// CPU MoE routing (ops/moe_routing.h): one serial pass per step of the definition, in float64,
// in token order — the reference the device kernels are tested against. The chosen experts of
// the backward's `expert` are checked against [0, E) (they index the scores). Under context
// parallelism the whole-sequence quantities (the choices before each local chunk, the sequence's
// choices per expert) come from the all-gathered counts, whose own row must equal this rank's
// choices (checked: a context from other logits is an error, not a silent misrouting).
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "myriad/core/error.h"
#include "myriad/ops/moe_routing.h"

namespace myriad::cpu {

namespace {

// One token's scores s (E) and the log-sum-exp of its logits; returns the lse.
double token_scores(const float* logits, std::int64_t E, bool sigmoid, double* s) {
  double max = -std::numeric_limits<double>::infinity();
  for (std::int64_t e = 0; e < E; ++e) max = std::max(max, static_cast<double>(logits[e]));
  double sum = 0.0;
  for (std::int64_t e = 0; e < E; ++e) sum += std::exp(static_cast<double>(logits[e]) - max);
  const double lse = max + std::log(sum);
  for (std::int64_t e = 0; e < E; ++e) {
    const double l = logits[e];
    s[e] = sigmoid ? 1.0 / (1.0 + std::exp(-l)) : std::exp(l - lse);
  }
  return lse;
}

// The order of the choice: a non-finite score is the lowest, equal scores go to the lower index.
double choice_key(double s) { return std::isnan(s) ? -std::numeric_limits<double>::infinity() : s; }

// p (the load-balance distribution) of expert e from the scores: softmax as is, sigmoid / sum.
double balance_prob(const double* s, double score_sum, std::int64_t e, bool sigmoid) {
  return sigmoid ? s[e] / score_sum : s[e];
}

// The top_k experts of one token by score into order[0, k) (order: E entries).
void choose(const double* s, std::int64_t k, std::vector<int>& order) {
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [s](int a, int b) {
    const double ka = choice_key(s[a]), kb = choice_key(s[b]);
    return ka > kb || (ka == kb && a < b);
  });
}

// Choices per (sequence, local chunk, expert) before dropping: (B, chunks, E).
std::vector<std::int64_t> choices_per_chunk(const RouteArgs& args, const std::int32_t* expert, std::int64_t N,
                                            std::int64_t E) {
  const std::int64_t k = args.top_k, chunk_len = args.seq_len / args.chunks();
  std::vector<std::int64_t> counts(static_cast<std::size_t>(N / chunk_len * E), 0);
  for (std::int64_t a = 0; a < N * k; ++a) ++counts[static_cast<std::size_t>(a / k / chunk_len * E + expert[a])];
  return counts;
}

// What routing needs of the whole sequences: per (b, local chunk, e) this rank's choices (`local`)
// and the choices in the sequence's earlier tokens outside the chunk, per (b, e) the sequence's
// choices, and its length Tg.
struct WholeSequences {
  std::int64_t length = 0;
  std::vector<std::int64_t> local, before, choices;
};

WholeSequences whole_sequences(const RouteArgs& args, const std::int32_t* expert, std::int64_t N, std::int64_t E,
                               const Tensor& context) {
  const std::int64_t B = N / args.seq_len, H = args.chunks();
  WholeSequences w{.length = args.seq_len * args.context_ranks,
                   .local = choices_per_chunk(args, expert, N, E),
                   .before = std::vector<std::int64_t>(static_cast<std::size_t>(B * H * E), 0),
                   .choices = std::vector<std::int64_t>(static_cast<std::size_t>(B * E), 0)};
  const std::vector<std::int64_t>& mine = w.local;
  if (args.context_ranks == 1) {
    w.choices = mine;  // one chunk per sequence
    return w;
  }
  const std::int64_t cp = args.context_ranks, me = args.context_rank;
  const std::int64_t* gathered = context.data<std::int64_t>();  // (cp, B, 2, E)
  auto global_chunk = [cp](std::int64_t rank, std::int64_t half) { return half == 0 ? rank : 2 * cp - 1 - rank; };
  for (std::int64_t i = 0; i < B * 2 * E; ++i) {
    MYRIAD_CHECK(gathered[me * B * 2 * E + i] == mine[static_cast<std::size_t>(i)],
                 "route_tokens: the context's row for context rank "
                     << me << " holds " << gathered[me * B * 2 * E + i] << " choices of expert " << i % E
                     << " in sequence " << i / (2 * E) << ", chunk " << i / E % 2 << ", but these logits make "
                     << mine[static_cast<std::size_t>(i)] << " (count_route_choices of other logits?)");
  }
  for (std::int64_t r = 0; r < cp; ++r) {
    for (std::int64_t b = 0; b < B; ++b) {
      for (std::int64_t half = 0; half < 2; ++half) {
        const std::int64_t* n = gathered + ((r * B + b) * 2 + half) * E;
        for (std::int64_t e = 0; e < E; ++e) {
          w.choices[static_cast<std::size_t>(b * E + e)] += n[e];
          for (std::int64_t h = 0; h < 2; ++h) {
            if (global_chunk(r, half) < global_chunk(me, h))
              w.before[static_cast<std::size_t>((b * 2 + h) * E + e)] += n[e];
          }
        }
      }
    }
  }
  return w;
}

}  // namespace

void route_tokens(const RouteArgs& args, const Tensor& logits_in, RoutedTokens& out, const Tensor& context) {
  const std::int64_t N = logits_in.size(0), E = logits_in.size(1), k = args.top_k, T = args.seq_len, B = N / T;
  const float* logits = logits_in.data<float>();
  auto* expert = out.expert.data<std::int32_t>();
  auto* weight = out.weight.data<float>();
  auto* slot = out.slot.data<std::int32_t>();
  auto* source = out.source.data<std::int32_t>();
  auto* counts = out.counts.data<std::int64_t>();
  // Scores, choice and weights per token; the z-loss and this rank's part of each sequence's
  // load-balance P (over the whole sequence's Tg tokens).
  const double Tg = static_cast<double>(T * args.context_ranks);
  std::vector<double> s(static_cast<std::size_t>(E)), P(static_cast<std::size_t>(B * E), 0.0);
  std::vector<int> order(static_cast<std::size_t>(E));
  double z_sum = 0.0;
  for (std::int64_t t = 0; t < N; ++t) {
    const double lse = token_scores(logits + t * E, E, args.sigmoid, s.data());
    z_sum += lse * lse;
    choose(s.data(), k, order);
    double chosen = 0.0, score_sum = 0.0;
    for (std::int64_t j = 0; j < k; ++j) chosen += s[order[j]];
    for (std::int64_t e = 0; e < E; ++e) score_sum += s[e];
    for (std::int64_t j = 0; j < k; ++j) {
      expert[t * k + j] = order[j];
      weight[t * k + j] = static_cast<float>(args.normalize_top_k ? s[order[j]] / chosen : s[order[j]]);
    }
    double* P_b = P.data() + t / T * E;
    for (std::int64_t e = 0; e < E; ++e) P_b[e] += balance_prob(s.data(), score_sum, e, args.sigmoid) / Tg;
  }
  const WholeSequences whole = whole_sequences(args, expert, N, E, context);
  // Capacity per sequence, granted in token (then choice) order: rank = the assignment's place
  // among its sequence's assignments to the same expert, counting the earlier chunks' first.
  const std::int64_t H = args.chunks(), chunk_len = T / H;
  std::vector<std::int64_t> rank(static_cast<std::size_t>(N * k)), taken(static_cast<std::size_t>(E));
  std::fill(counts, counts + E, 0);
  for (std::int64_t chunk = 0; chunk < B * H; ++chunk) {
    std::copy_n(whole.before.begin() + chunk * E, E, taken.begin());
    for (std::int64_t a = chunk * chunk_len * k; a < (chunk + 1) * chunk_len * k; ++a) {
      const std::int64_t r = taken[static_cast<std::size_t>(expert[a])]++;
      rank[static_cast<std::size_t>(a)] = r;
      if (args.capacity < 0 || r < args.capacity) ++counts[expert[a]];
    }
  }
  // Rows: each expert's from its start, in token order.
  const std::int64_t R = out.source.numel(), M = expert_block_rows(args, N);
  std::fill(source, source + R, -1);
  std::vector<std::int64_t> cursor(static_cast<std::size_t>(E));
  for (std::int64_t e = 0, start = 0; e < E; start += counts[e], ++e)
    cursor[static_cast<std::size_t>(e)] = args.padded ? e * M : start;
  std::int64_t dropped = 0;
  for (std::int64_t a = 0; a < N * k; ++a) {
    if (args.capacity >= 0 && rank[static_cast<std::size_t>(a)] >= args.capacity) {
      slot[a] = -1;
      ++dropped;
      continue;
    }
    const std::int64_t row = cursor[static_cast<std::size_t>(expert[a])]++;
    slot[a] = static_cast<std::int32_t>(row);
    source[row] = static_cast<std::int32_t>(a / k);
  }
  if (!out.totals.defined()) return;
  // Totals: this rank's assignments per expert, drops, its share of the load-balance loss per
  // sequence (f from the whole sequence), the z-loss.
  const std::vector<std::int64_t>& mine = whole.local;
  double* totals = out.totals.data<double>();
  double aux_sum = 0.0;
  for (std::int64_t b = 0; b < B; ++b) {
    double aux = 0.0;
    for (std::int64_t e = 0; e < E; ++e) {
      const double f =
          static_cast<double>(whole.choices[static_cast<std::size_t>(b * E + e)]) / (Tg * static_cast<double>(k));
      aux += f * P[static_cast<std::size_t>(b * E + e)];
      for (std::int64_t h = 0; h < H; ++h)
        totals[e] += static_cast<double>(mine[static_cast<std::size_t>((b * H + h) * E + e)]);
    }
    aux_sum += static_cast<double>(E) * aux;
  }
  totals[E] += static_cast<double>(dropped);
  totals[E + 1] += aux_sum;
  totals[E + 2] += z_sum;
}

void route_tokens_backward(const RouteArgs& args, const Tensor& logits_in, const Tensor& expert_in,
                           const Tensor& grad_weight_in, double aux_scale, double z_scale, Tensor& grad_logits,
                           const Tensor& context, const Tensor& scale) {
  if (scale.defined()) {  // read now: on an emulated device, when the recorded launch runs
    const auto s = static_cast<double>(scale.data<float>()[0]);
    aux_scale *= s;
    z_scale *= s;
  }
  const std::int64_t N = logits_in.size(0), E = logits_in.size(1), k = args.top_k, T = args.seq_len;
  const float* logits = logits_in.data<float>();
  const auto* expert = expert_in.data<std::int32_t>();
  const float* grad_weight = grad_weight_in.data<float>();
  float* d_logits = grad_logits.data<float>();
  for (std::int64_t a = 0; a < N * k; ++a) {
    MYRIAD_CHECK(expert[a] >= 0 && expert[a] < E, "route_tokens_backward: expert " << expert[a] << " at position ["
                                                                                   << a / k << ", " << a % k
                                                                                   << "] is outside [0, " << E << ")");
  }
  const WholeSequences whole = whole_sequences(args, expert, N, E, context);
  const double Tg = static_cast<double>(whole.length);
  std::vector<double> s(static_cast<std::size_t>(E)), ds(static_cast<std::size_t>(E));
  for (std::int64_t t = 0; t < N; ++t) {
    const double lse = token_scores(logits + t * E, E, args.sigmoid, s.data());
    const std::int64_t* choices_b = whole.choices.data() + t / T * E;
    const std::int32_t* chosen = expert + t * k;
    const float* g = grad_weight + t * k;
    double Z = 0.0, score_sum = 0.0;
    for (std::int64_t j = 0; j < k; ++j) Z += s[chosen[j]];
    for (std::int64_t e = 0; e < E; ++e) score_sum += s[e];
    // Load balance: d aux_s / d p_e = E f_e / Tg, through p's normalisation for sigmoid scores.
    double dp_dot_p = 0.0;
    for (std::int64_t e = 0; e < E; ++e) {
      const double dp =
          aux_scale * static_cast<double>(E) * static_cast<double>(choices_b[e]) / (Tg * static_cast<double>(k)) / Tg;
      ds[static_cast<std::size_t>(e)] = dp;
      dp_dot_p += dp * balance_prob(s.data(), score_sum, e, args.sigmoid);
    }
    if (args.sigmoid) {
      for (std::int64_t e = 0; e < E; ++e)
        ds[static_cast<std::size_t>(e)] = (ds[static_cast<std::size_t>(e)] - dp_dot_p) / score_sum;
    }
    // Combine weights: w_j = s_j (/ Z).
    double gw = 0.0;
    for (std::int64_t j = 0; j < k; ++j) gw += static_cast<double>(g[j]) * (s[chosen[j]] / Z);
    for (std::int64_t j = 0; j < k; ++j) {
      ds[static_cast<std::size_t>(chosen[j])] += args.normalize_top_k ? (static_cast<double>(g[j]) - gw) / Z : g[j];
    }
    // Scores -> logits, then the z-loss: d z_t / d logit = 2 lse softmax(logits).
    float* dl = d_logits + t * E;
    double dot = 0.0;
    for (std::int64_t e = 0; e < E; ++e) dot += ds[static_cast<std::size_t>(e)] * s[static_cast<std::size_t>(e)];
    for (std::int64_t e = 0; e < E; ++e) {
      const double se = s[static_cast<std::size_t>(e)], dse = ds[static_cast<std::size_t>(e)];
      double d = args.sigmoid ? dse * se * (1.0 - se) : se * (dse - dot);
      if (z_scale != 0.0) d += z_scale * 2.0 * lse * std::exp(static_cast<double>(logits[t * E + e]) - lse);
      dl[e] = static_cast<float>(d);
    }
  }
}

void count_route_choices(const RouteArgs& args, const Tensor& logits_in, Tensor& counts) {
  const std::int64_t N = logits_in.size(0), E = logits_in.size(1), k = args.top_k;
  const std::int64_t chunk_len = args.seq_len / args.chunks();
  const float* logits = logits_in.data<float>();
  auto* out = counts.data<std::int64_t>();
  std::fill(out, out + counts.numel(), 0);
  std::vector<double> s(static_cast<std::size_t>(E));
  std::vector<int> order(static_cast<std::size_t>(E));
  for (std::int64_t t = 0; t < N; ++t) {
    token_scores(logits + t * E, E, args.sigmoid, s.data());
    choose(s.data(), k, order);
    for (std::int64_t j = 0; j < k; ++j) ++out[t / chunk_len * E + order[j]];
  }
}

}  // namespace myriad::cpu
