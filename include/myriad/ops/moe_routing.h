// MoE routing as ops — the router's decisions for one micro-batch, computed where the router
// logits are (no copy to the host inside a step), and their gradient.
//
// logits (N, E) f32: N tokens = B sequences of T = args.seq_len tokens (token t of sequence t / T),
// E experts. Per token:
//   scores  s = softmax(logits) over the experts, or sigmoid(logits) per expert (args.sigmoid);
//   choice  the top_k experts by score, best first; equal scores go to the lower expert index
//           (a non-finite score counts as the lowest), so the choice is deterministic;
//   weight  the chosen scores, divided by their sum when args.normalize_top_k.
// Capacity (args.capacity >= 0): within one sequence an expert takes at most `capacity`
// assignments, granted in token order (then choice order); later ones are dropped (slot -1: the
// residual stream carries the token on). A token's routing therefore depends only on itself and
// the tokens before it in its sequence, never on the micro-batch size or the parallel layout.
// args.capacity = -1: dropless, every assignment kept.
// Rows: the kept assignments in expert order, within an expert in token order. Two layouts:
//   compact (args.padded false): expert e's rows are [start_e, start_e + counts[e]) with start_e
//       = counts[0] + ... + counts[e - 1]; source has N k entries, those past the kept total -1
//       (dropless: none). The caller learns the offsets from `counts`.
//   padded  (args.padded true, capacity >= 0): expert e's rows are [e M, e M + counts[e]), M =
//       expert_block_rows(args, N) = B min(capacity, T); source has E M entries, -1 for the
//       unused rows of each block. The offsets e M are known without reading anything back, which
//       is what a device step needs (the experts' grouped GEMMs are sized on the host).
// Outputs (route_tokens; all written, on the logits' device):
//   expert (N, k) i32   chosen experts, best first
//   weight (N, k) f32   combine weights (kept or dropped)
//   slot   (N, k) i32   row of each assignment, -1 = dropped
//   source (R)    i32   token of each row, -1 = none (R = routed_rows(args, N, E))
//   counts (E)    i64   rows kept per expert
//   totals (E + 3) f64  ADDED to (undefined: not computed): [0, E) assignments per expert before
//                       dropping, [E] assignments dropped, [E + 1] the load-balance loss summed over
//                       sequences, [E + 2] the z-loss summed over tokens
// Auxiliary losses (ST-MoE / Switch), from the logits:
//   load balance, per sequence: aux_s = E sum_e f_e P_e, f_e = share of the sequence's top_k
//     assignments (before dropping) that chose e, P_e = mean over its tokens of p_e, with p = the
//     softmax scores (sigmoid: the scores normalised to sum 1 per token); f is a constant;
//   router z-loss, per token: z_t = (log sum_e exp(logit_e))^2.
// route_tokens_backward writes grad_logits (N, E) = the gradient of
//   sum_{t,j} grad_weight[t, j] weight[t, j] + aux_scale sum_s aux_s + z_scale sum_t z_t
// with respect to the logits, the choice and the drops held fixed (`expert` from the forward).
// The arithmetic runs in float64 on every backend (the model passes coef * T * loss_scale and
// coef * loss_scale as the scales); backends agree to float64 rounding of exp/log. `scale`, when
// defined (one f32 element where the op runs), multiplies both scales when the op runs: a recorded
// CUDA graph passes coef * T and coef with the step's staged loss scale, which its replays follow.
// Context parallelism (args.context_ranks = cp > 1, nn/context_parallel.h): each of the B local
// sequences of T = args.seq_len tokens is two chunks of c = T / 2 tokens — global chunks
// context_rank and 2 cp - 1 - context_rank — of a sequence of Tg = cp T tokens, and routing is
// defined on the whole sequence as above (capacity in global token order, f and P over Tg
// tokens). The ranks first count their top-k choices per chunk (count_route_choices: (B, 2, E)
// i64, before dropping), all-gather them over cp into `context` (cp, B, 2, E), and pass that to
// route_tokens and its backward: an assignment's place in its expert's capacity order then starts
// from the choices of the sequence's earlier chunks (held by any rank), and f comes from every
// chunk's choices. Each rank computes its own tokens' outputs; its totals hold its own tokens'
// assignments, drops and z-loss, and its share E sum_e f_e (sum of its tokens' p_e) / Tg of the
// load-balance loss, so totals summed over the cp ranks equal those of the whole sequences.
#pragma once

#include <cstdint>

#include "myriad/core/tensor.h"

namespace myriad {

struct RouteArgs {
  std::int64_t top_k = 1;
  std::int64_t seq_len = 1;     // T; N must be a multiple of it
  std::int64_t capacity = -1;   // assignments per expert per sequence; -1 = dropless
  bool sigmoid = false;         // scores: sigmoid per expert instead of softmax over experts
  bool normalize_top_k = true;  // combine weights = chosen scores / their sum
  bool padded = false;          // row layout (above); needs capacity >= 0
  // Context parallelism (above): the cp group's size and this rank's place in it.
  std::int64_t context_ranks = 1, context_rank = 0;
  std::int64_t chunks() const { return context_ranks > 1 ? 2 : 1; }  // per local sequence
};

struct RoutedTokens {
  Tensor expert, weight, slot, source, counts, totals;
};

// M of the padded layout: the rows each expert's block holds, B min(capacity, T).
std::int64_t expert_block_rows(const RouteArgs& args, std::int64_t tokens);
// R: the length of `source` for N tokens and E experts in the args' layout.
std::int64_t routed_rows(const RouteArgs& args, std::int64_t tokens, std::int64_t experts);

// `context` (cp, B, 2, E) i64: required when args.context_ranks > 1, undefined otherwise.
void route_tokens(const RouteArgs& args, const Tensor& logits, RoutedTokens& out, const Tensor& context = Tensor());
void route_tokens_backward(const RouteArgs& args, const Tensor& logits, const Tensor& expert, const Tensor& grad_weight,
                           double aux_scale, double z_scale, Tensor& grad_logits, const Tensor& context = Tensor(),
                           const Tensor& scale = Tensor());
// counts (B, args.chunks(), E) i64 written: each local chunk's top-k choices per expert.
void count_route_choices(const RouteArgs& args, const Tensor& logits, Tensor& counts);

namespace cpu {
void route_tokens(const RouteArgs& args, const Tensor& logits, RoutedTokens& out, const Tensor& context);
void route_tokens_backward(const RouteArgs& args, const Tensor& logits, const Tensor& expert, const Tensor& grad_weight,
                           double aux_scale, double z_scale, Tensor& grad_logits, const Tensor& context,
                           const Tensor& scale);
void count_route_choices(const RouteArgs& args, const Tensor& logits, Tensor& counts);
}  // namespace cpu

}  // namespace myriad
