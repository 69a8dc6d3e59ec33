// MoE routing, dispatch point: validates the arguments, shapes, dtypes and devices, then picks
// the backend (ops/moe_routing.h). Logit values are not checked (a non-finite logit makes its
// token's weights non-finite, which the step's non-finite check then sees).
#include "myriad/ops/moe_routing.h"

#include <algorithm>

#include "myriad/ops/backend.h"
#include "myriad/ops/op_checks.h"

namespace myriad {

namespace {

// The arguments against logits (N, E); returns {N, E}.
std::pair<std::int64_t, std::int64_t> check_logits(const char* op, const RouteArgs& args, const Tensor& logits) {
  ops::check_defined(op, "logits", logits);
  ops::check_dtype(op, "logits", logits, DType::f32);
  ops::check_rank(op, "logits", logits, 2);
  ops::check_contiguous(op, "logits", logits);
  const std::int64_t N = logits.size(0), E = logits.size(1);
  MYRIAD_CHECK(E >= 1 && args.top_k >= 1 && args.top_k <= E, op << ": top_k " << args.top_k << " must lie in [1, " << E
                                                                << "] (the experts of logits " << logits.describe()
                                                                << ")");
  MYRIAD_CHECK(args.seq_len > 0 && N % args.seq_len == 0,
               op << ": " << N << " tokens are not whole sequences of T = " << args.seq_len);
  MYRIAD_CHECK(args.capacity >= -1, op << ": capacity " << args.capacity << " must be >= 0, or -1 for dropless");
  MYRIAD_CHECK(!args.padded || args.capacity >= 0,
               op << ": the padded row layout needs a capacity (dropless rows have no fixed size)");
  MYRIAD_CHECK(args.context_ranks >= 1 && args.context_rank >= 0 && args.context_rank < args.context_ranks,
               op << ": context rank " << args.context_rank << " of " << args.context_ranks);
  MYRIAD_CHECK(args.context_ranks == 1 || args.seq_len % 2 == 0,
               op << ": under context parallelism a local sequence is two chunks; T = " << args.seq_len << " is odd");
  return {N, E};
}

// The all-gathered choice counts: (cp, B, 2, E) i64 under context parallelism, else undefined.
void check_context(const char* op, const RouteArgs& args, std::int64_t N, std::int64_t E, const Tensor& context) {
  if (args.context_ranks == 1) {
    MYRIAD_CHECK(!context.defined(), op << ": a context " << context.describe() << " without context parallelism");
    return;
  }
  ops::check_defined(op, "context", context);
  ops::check_dtype(op, "context", context, DType::i64);
  ops::check_shape(op, "context", context, {args.context_ranks, N / args.seq_len, 2, E});
  ops::check_contiguous(op, "context", context);
}

void check_i32(const char* op, const char* name, const Tensor& t, const Shape& shape) {
  ops::check_defined(op, name, t);
  ops::check_dtype(op, name, t, DType::i32);
  ops::check_shape(op, name, t, shape);
  ops::check_contiguous(op, name, t);
}

}  // namespace

std::int64_t expert_block_rows(const RouteArgs& args, std::int64_t tokens) {
  if (args.capacity < 0 || args.seq_len <= 0) return tokens * args.top_k;
  return tokens / args.seq_len * std::min(args.capacity, args.seq_len);
}

std::int64_t routed_rows(const RouteArgs& args, std::int64_t tokens, std::int64_t experts) {
  return args.padded ? experts * expert_block_rows(args, tokens) : tokens * args.top_k;
}

void route_tokens(const RouteArgs& args, const Tensor& logits, RoutedTokens& out, const Tensor& context) {
  const char* op = "route_tokens";
  const auto [N, E] = check_logits(op, args, logits);
  check_context(op, args, N, E, context);
  const std::int64_t k = args.top_k;
  check_i32(op, "expert", out.expert, {N, k});
  ops::check_f32_contiguous(op, "weight", out.weight, {N, k});
  check_i32(op, "slot", out.slot, {N, k});
  check_i32(op, "source", out.source, {routed_rows(args, N, E)});
  ops::check_defined(op, "counts", out.counts);
  ops::check_dtype(op, "counts", out.counts, DType::i64);
  ops::check_shape(op, "counts", out.counts, {E});
  ops::check_contiguous(op, "counts", out.counts);
  if (out.totals.defined()) {
    ops::check_dtype(op, "totals", out.totals, DType::f64);
    ops::check_shape(op, "totals", out.totals, {E + 3});
    ops::check_contiguous(op, "totals", out.totals);
  }
  const Device device = ops::check_same_device(op, {{"logits", &logits},
                                                    {"expert", &out.expert},
                                                    {"weight", &out.weight},
                                                    {"slot", &out.slot},
                                                    {"source", &out.source},
                                                    {"counts", &out.counts},
                                                    {"totals", &out.totals},
                                                    {"context", &context}});
  if (device.is_cpu()) return cpu::route_tokens(args, logits, out, context);
  ops::backend_of(op, {{"logits", &logits}, {"expert", &out.expert}}).route_tokens(args, logits, out, context);
}

void route_tokens_backward(const RouteArgs& args, const Tensor& logits, const Tensor& expert, const Tensor& grad_weight,
                           double aux_scale, double z_scale, Tensor& grad_logits, const Tensor& context,
                           const Tensor& scale) {
  const char* op = "route_tokens_backward";
  const auto [N, E] = check_logits(op, args, logits);
  check_context(op, args, N, E, context);
  const std::int64_t k = args.top_k;
  check_i32(op, "expert", expert, {N, k});
  ops::check_f32_contiguous(op, "grad_weight", grad_weight, {N, k});
  ops::check_f32_contiguous(op, "grad_logits", grad_logits, {N, E});
  if (scale.defined()) ops::check_f32_contiguous(op, "scale", scale, {1});
  const Device device = ops::check_same_device(op, {{"logits", &logits},
                                                    {"expert", &expert},
                                                    {"grad_weight", &grad_weight},
                                                    {"grad_logits", &grad_logits},
                                                    {"context", &context},
                                                    {"scale", &scale}});
  if (device.is_cpu())
    return cpu::route_tokens_backward(args, logits, expert, grad_weight, aux_scale, z_scale, grad_logits, context,
                                      scale);
  ops::backend_of(op, {{"logits", &logits}, {"grad_logits", &grad_logits}})
      .route_tokens_backward(args, logits, expert, grad_weight, aux_scale, z_scale, grad_logits, context, scale);
}

void count_route_choices(const RouteArgs& args, const Tensor& logits, Tensor& counts) {
  const char* op = "count_route_choices";
  const auto [N, E] = check_logits(op, args, logits);
  ops::check_defined(op, "counts", counts);
  ops::check_dtype(op, "counts", counts, DType::i64);
  ops::check_shape(op, "counts", counts, {N / args.seq_len, args.chunks(), E});
  ops::check_contiguous(op, "counts", counts);
  const Device device = ops::check_same_device(op, {{"logits", &logits}, {"counts", &counts}});
  if (device.is_cpu()) return cpu::count_route_choices(args, logits, counts);
  ops::backend_of(op, {{"logits", &logits}, {"counts", &counts}}).count_route_choices(args, logits, counts);
}

}  // namespace myriad
