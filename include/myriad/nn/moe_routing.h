// MoE routing — the router's decisions for one micro-batch, computed on the host from the router
// logits (N tokens x E experts; N = B sequences of T tokens, token t of sequence t / T).
//
// Scores s = softmax(logits) over the experts, or sigmoid(logits) per expert (MoeSpec::score).
// Each token chooses its top_k experts by score, best first; equal scores go to the lower expert
// index, so the choice is deterministic. Combine weights are the chosen scores, divided by their
// sum when normalize_top_k.
// Capacity (MoeSpec::capacity(T)): within one sequence an expert takes at most `capacity`
// assignments, granted in token order (then choice order): the first tokens of the sequence
// that choose an expert get it, later ones are dropped (their weight is lost, the residual stream
// carries the token on). A token's routing therefore depends only on itself and the tokens before
// it in its sequence (nothing leaks from the future), and on nothing outside its sequence: the
// same tokens are dropped whatever the micro-batch size, data- or expert-parallel layout.
// Rows: the kept assignments laid out in expert order (expert 0's rows, then expert 1's, ...),
// within an expert in token order; offsets (E + 1) delimit the experts; slot (N, k) is each
// assignment's row (-1 = dropped) and source (R) each row's token.
// Auxiliary losses (ST-MoE / Switch), both from the logits:
//   load balance, per sequence: aux_s = E * sum_e f_e * P_e, f_e = share of the sequence's
//     top_k assignments (before dropping) that chose e, P_e = mean over its tokens of p_e, with
//     p = the softmax scores (sigmoid: the scores normalised to sum 1 per token); f is a constant;
//   router z-loss, per token: z_t = (log sum_e exp(logit_e))^2.
// The plan sums them (aux over sequences, z over tokens); routing_backward takes the scales that
// turn the sums into the training objective (the model passes coef * T * loss_scale and
// coef * loss_scale, so both are normalised like the language-model loss).
#pragma once

#include <cstdint>
#include <vector>

#include "myriad/nn/transformer_config.h"

namespace myriad::nn {

struct RoutingPlan {
  std::int64_t tokens = 0, experts = 0, top_k = 0, seq_len = 0;
  std::vector<double> scores;         // (N, E) s
  std::vector<std::int32_t> expert;   // (N, k) chosen experts, best first
  std::vector<float> weight;          // (N, k) combine weights (kept or not)
  std::vector<std::int32_t> slot;     // (N, k) row of the assignment, -1 = dropped
  std::vector<std::int32_t> source;   // (R) token of each row
  std::vector<std::int64_t> offsets;  // (E + 1) rows of expert e: [offsets[e], offsets[e + 1])
  std::vector<std::int64_t> routed;   // (E) assignments per expert before dropping
  std::int64_t dropped = 0;           // assignments dropped over capacity
  double aux_loss_sum = 0.0;          // sum over sequences of aux_s
  double z_loss_sum = 0.0;            // sum over tokens of z_t
  std::vector<double> lse;            // (N) log-sum-exp of each token's logits
  std::int64_t rows() const { return offsets.empty() ? 0 : offsets.back(); }
};

// `logits`: N * E floats, row-major. N must be a multiple of T.
RoutingPlan plan_routing(const float* logits, std::int64_t N, std::int64_t E, std::int64_t T, const MoeSpec& spec);

// d_logits (N * E, written) = the gradient of
//   sum_{t,j} d_weight[t, j] * weight[t, j] + aux_scale * aux_loss_sum + z_scale * z_loss_sum
// with respect to the logits (the choice and the drop decisions are constants).
void routing_backward(const RoutingPlan& plan, const float* logits, const float* d_weight, double aux_scale,
                      double z_scale, const MoeSpec& spec, float* d_logits);

}  // namespace myriad::nn
