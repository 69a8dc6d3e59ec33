// MoeLayer: parameters, forward and backward of the mixture-of-experts MLP over the ops (any
// placement): routing by route_tokens where the model computes, the row layout by
// moe_route_args, the expert-parallel exchange through the split's ExpertParallel (moe_layer.h).
#include "myriad/nn/moe_layer.h"

#include <cmath>
#include <cstring>

#include "myriad/nn/linear.h"
#include "myriad/ops/activations.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/grouped_matmul.h"
#include "myriad/ops/placement.h"
#include "myriad/ops/token_routing.h"

namespace myriad::nn {

namespace {

constexpr RowIndexArgs kRoutedIndices{.indices_checked = true};  // made by route_tokens or plan_rows

template <typename T>
Tensor host_tensor(const std::vector<T>& values, const Shape& shape, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(T));
  return t;
}

std::vector<std::int64_t> prefix_offsets(const std::int64_t* counts, std::int64_t n) {
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(n + 1), 0);
  for (std::int64_t i = 0; i < n; ++i) offsets[i + 1] = offsets[i] + counts[i];
  return offsets;
}

}  // namespace

RouteArgs moe_route_args(const MoeSpec& spec, std::int64_t seq_len, const ops::Placement& placement,
                         const ContextParallel& cp) {
  const std::int64_t capacity = spec.capacity(seq_len * cp.size());  // per whole sequence
  return RouteArgs{.top_k = spec.top_k,
                   .seq_len = seq_len,
                   .capacity = capacity,
                   .sigmoid = spec.score == RouterScore::sigmoid,
                   .normalize_top_k = spec.normalize_top_k,
                   .padded = capacity >= 0 && !placement.on_host(),
                   .context_ranks = cp.size(),
                   .context_rank = cp.rank()};
}

void MoeActivations::release() { *this = MoeActivations{}; }

std::vector<double> MoeLayerStats::host_totals() const {
  if (!totals.defined()) return {};
  const Tensor host = ops::placement_of(totals, "moe totals").to_host(totals);
  return std::vector<double>(host.data<double>(), host.data<double>() + host.numel());
}

void MoeLayerStats::count(std::int64_t routed_tokens, const RouteArgs& route) {
  assignments += routed_tokens * route.top_k;
  if (route.context_rank == 0) sequences += routed_tokens / route.seq_len;  // once per cp group
  tokens += routed_tokens;
}

MoeLayer::MoeLayer(const TransformerConfig& config, const ModelSplit& split, int layer, ParameterStore& store)
    : config_(config), split_(split), layer_(layer) {
  const MoeSpec& moe = config.moe;
  const std::int64_t C = config.n_embd, E = moe.num_experts, Fe = config.expert_ffn(), S = moe.shared_experts;
  const std::string prefix = "blocks." + std::to_string(layer) + ".moe.";
  const float std = config.init_std;
  const float residual_std = std / std::sqrt(2.0f * static_cast<float>(config.n_layer));
  const bool gelu = config.mlp == MlpKind::gelu;
  // Each parameter declared whole; the shard plan decides this rank's part (shard_plan.h): the
  // experts split over ep, and under tp the whole layer on every tp rank, its gradient from this
  // rank's share of the sequences (moe_layer.h).
  auto declare = [&](const std::string& name, const Shape& shape, float init_std) {
    return parallelize({.name = prefix + name, .shape = shape, .init_std = init_std}, split.shard_plan(),
                       split.shard_coordinate(), store);
  };
  router_ = declare("router.weight", {E, C}, std);
  if (S > 0) {
    shared_fc_ = declare(gelu ? "shared.fc.weight" : "shared.gate.weight", {S * Fe, C}, std);
    if (!gelu) shared_up_ = declare("shared.up.weight", {S * Fe, C}, std);
    shared_out_ = declare(gelu ? "shared.proj.weight" : "shared.down.weight", {C, S * Fe}, residual_std);
  }
  experts_fc_ = declare(gelu ? "experts.fc.weight" : "experts.gate.weight", {E, Fe, C}, std);
  if (!gelu) experts_up_ = declare("experts.up.weight", {E, Fe, C}, std);
  experts_out_ = declare(gelu ? "experts.proj.weight" : "experts.down.weight", {E, C, Fe}, residual_std);
}

void MoeLayer::plan_rows(MoeActivations& a, const ops::Placement& placement, const Tensor& counts_pair) const {
  ExpertExchange& x = a.exchange;
  const int ep = split_.ep_size();
  const std::int64_t E = config_.moe.num_experts, El = E / ep, N = a.logits.size(0);
  x = ExpertExchange{};
  if (a.route.padded) {  // every size from the shapes: nothing read back
    const std::int64_t M = expert_block_rows(a.route, N);
    a.offsets.assign(static_cast<std::size_t>(E + 1), 0);
    for (std::int64_t e = 0; e <= E; ++e) a.offsets[e] = e * M;
    if (ep == 1) {
      x.local_offsets = a.offsets;
      return;
    }
    x.send_rows.assign(ep, El * M);
    x.recv_rows.assign(ep, El * M);
    x.local_offsets.assign(static_cast<std::size_t>(El + 1), 0);
    for (std::int64_t e = 0; e <= El; ++e) x.local_offsets[e] = e * ep * M;
    PaddedPermutations& kept = padded_permutations_;
    if (kept.block_rows == M && kept.regroup.defined() && kept.regroup.device() == placement.device()) {
      x.regroup = kept.regroup;
      x.ungroup = kept.ungroup;
      return;
    }
    // Received: by source rank, then local expert; local: by local expert, then source rank.
    std::vector<std::int32_t> regroup(static_cast<std::size_t>(El * ep * M)), ungroup(regroup.size());
    for (std::int64_t e = 0; e < El; ++e) {
      for (std::int64_t p = 0; p < ep; ++p) {
        for (std::int64_t i = 0; i < M; ++i) {
          const std::int64_t local = (e * ep + p) * M + i, received = (p * El + e) * M + i;
          regroup[local] = static_cast<std::int32_t>(received);
          ungroup[received] = static_cast<std::int32_t>(local);
        }
      }
    }
    const std::int64_t n = x.local_rows();
    x.regroup = placement.from_host(host_tensor(regroup, {n}, DType::i32));
    x.ungroup = placement.from_host(host_tensor(ungroup, {n}, DType::i32));
    kept = PaddedPermutations{.block_rows = M, .regroup = x.regroup, .ungroup = x.ungroup};
    return;
  }
  // Compact rows: the counts are read (with ep > 1 this rank's and its peers' in one transfer).
  Tensor pair = counts_pair;
  if (ep > 1) {
    Tensor received = pair.view({2 * E}).slice(0, E, 2 * E);
    split_.expert_parallel().exchange_counts(a.routing.counts, received);
  }
  const Tensor host = placement.to_host(ep > 1 ? pair : a.routing.counts);
  const std::int64_t* mine = host.data<std::int64_t>();
  a.offsets = prefix_offsets(mine, E);
  if (ep == 1) {
    x.local_offsets = a.offsets;
    return;
  }
  const std::int64_t* got = mine + E;  // [source rank][local expert]
  x.send_rows.assign(ep, 0);
  x.recv_rows.assign(ep, 0);
  for (int p = 0; p < ep; ++p) {
    x.send_rows[p] = a.offsets[(p + 1) * El] - a.offsets[p * El];
    for (std::int64_t e = 0; e < El; ++e) x.recv_rows[p] += got[p * El + e];
  }
  x.local_offsets.assign(El + 1, 0);
  for (std::int64_t e = 0; e < El; ++e) {
    x.local_offsets[e + 1] = x.local_offsets[e];
    for (int p = 0; p < ep; ++p) x.local_offsets[e + 1] += got[p * El + e];
  }
  // Received rows come by source rank, each source's by local expert; local rows go by local
  // expert, then source rank.
  std::vector<std::int64_t> source_base(ep + 1, 0);
  for (int p = 0; p < ep; ++p) source_base[p + 1] = source_base[p] + x.recv_rows[p];
  std::vector<std::int32_t> regroup(static_cast<std::size_t>(x.local_rows())), ungroup(regroup.size());
  std::int64_t at = 0;
  for (std::int64_t e = 0; e < El; ++e) {
    for (int p = 0; p < ep; ++p) {
      std::int64_t first = source_base[p];
      for (std::int64_t before = 0; before < e; ++before) first += got[p * El + before];
      for (std::int64_t i = 0; i < got[p * El + e]; ++i, ++at) {
        regroup[at] = static_cast<std::int32_t>(first + i);
        ungroup[first + i] = static_cast<std::int32_t>(at);
      }
    }
  }
  const std::int64_t n = x.local_rows();
  x.regroup = placement.from_host(host_tensor(regroup, {n}, DType::i32));
  x.ungroup = placement.from_host(host_tensor(ungroup, {n}, DType::i32));
}

Tensor MoeLayer::choice_context(const MoeActivations& a) const {
  const ContextParallel& cp = split_.context_parallel();
  if (cp.size() == 1) return Tensor();
  const ops::Placement placement = ops::placement_of(a.logits, "moe router logits");
  const std::int64_t B = a.logits.size(0) / a.route.seq_len, E = config_.moe.num_experts;
  Tensor mine = placement.empty({B, 2, E}, DType::i64), every = placement.empty({cp.size() * B, 2, E}, DType::i64);
  count_route_choices(a.route, a.logits, mine);
  cp.all_gather(mine, every);
  return every.view({cp.size(), B, 2, E});
}

Tensor MoeLayer::dispatch(const Tensor& rows, const MoeActivations& a) const {
  if (split_.ep_size() == 1) return rows;
  const ExpertExchange& x = a.exchange;
  const ops::Placement placement = ops::placement_of(rows, "moe rows");
  const std::int64_t n = x.local_rows(), C = rows.size(1);
  Tensor received = placement.empty({n, C}), local = placement.empty({n, C});
  split_.expert_parallel().exchange_rows(rows, x.send_rows, received, x.recv_rows);
  if (n > 0) gather_rows(received, x.regroup, local, kRoutedIndices);
  return local;
}

Tensor MoeLayer::undispatch(const Tensor& local, const MoeActivations& a) const {
  if (split_.ep_size() == 1) return local;
  const ExpertExchange& x = a.exchange;
  const ops::Placement placement = ops::placement_of(local, "moe rows");
  const std::int64_t C = local.size(1);
  Tensor by_source = placement.empty({x.local_rows(), C}), back = placement.empty({a.rows(), C});
  if (x.local_rows() > 0) gather_rows(local, x.ungroup, by_source, kRoutedIndices);
  split_.expert_parallel().exchange_rows(by_source, x.recv_rows, back, x.send_rows);
  return back;
}

void MoeLayer::forward(const ParameterStore& store, const Tensor& h, Tensor& out, MoeActivations& a) const {
  const ops::Placement placement = ops::placement_of(h, "moe input");
  const MoeSpec& moe = config_.moe;
  const std::int64_t B = h.size(0), T = h.size(1), N = B * T, C = config_.n_embd, E = moe.num_experts;
  const std::int64_t k = moe.top_k, Fe = config_.expert_ffn();
  const Tensor hf = h.view({N, C});
  Tensor of = out.view({N, C});
  // Router (f32) and the routing decisions, where the model computes.
  a.logits = placement.empty({N, E});
  linear_forward(hf, store[router_].value, Tensor(), a.logits);
  a.route = moe_route_args(moe, T, placement, split_.context_parallel());
  a.context = choice_context(a);
  const int ep = split_.ep_size();
  // This rank's counts, then (compact rows, ep > 1) the peers' for it: read in one transfer.
  const Tensor counts_pair = placement.empty({a.route.padded || ep == 1 ? E : 2 * E}, DType::i64);
  RoutedTokens& r = a.routing;
  r.expert = placement.empty({N, k}, DType::i32);
  r.weight = placement.empty({N, k});
  r.slot = placement.empty({N, k}, DType::i32);
  r.source = placement.empty({routed_rows(a.route, N, E)}, DType::i32);
  r.counts = counts_pair.slice(0, 0, E);
  r.totals = a.stats;
  route_tokens(a.route, a.logits, r, a.context);
  plan_rows(a, placement, counts_pair);
  const std::int64_t R = a.rows();
  Tensor rows = placement.empty({R, C});
  if (R > 0) gather_rows(hf, r.source.slice(0, 0, R), rows, kRoutedIndices);
  // This rank's experts on the rows routed to them (from every rank of the group).
  a.x_rows = dispatch(rows, a);
  const std::int64_t n = a.exchange.local_rows();
  const std::vector<std::int64_t>& offsets = a.exchange.local_offsets;
  a.fc = placement.empty({n, Fe});
  a.act = placement.empty({n, Fe});
  Tensor y_local = placement.empty({n, C});
  if (n > 0) {
    // grouped_linear_forward: the grouped matmul, or the experts' INT8 weights (inference).
    const Tensor x = gemm_operand(a.x_rows, operands_);
    grouped_linear_forward(x, store[experts_fc_], offsets, a.fc, operands_);
    if (config_.mlp == MlpKind::gelu) {
      gelu_forward(GeluArgs{}, a.fc, a.act);
    } else {
      a.up = placement.empty({n, Fe});
      grouped_linear_forward(x, store[experts_up_], offsets, a.up, operands_);
      swiglu_forward(SwigluArgs{}, a.fc, a.up, a.act);
    }
    grouped_linear_forward(gemm_operand(a.act, operands_), store[experts_out_], offsets, y_local, operands_);
  }
  a.y_rows = undispatch(y_local, a);
  if (R > 0) {
    combine_rows_forward(a.y_rows, r.slot, r.weight, of, kRoutedIndices);
  } else {
    zero(of);
  }
  if (shared_fc_ != npos) {  // shared experts: a dense MLP every token uses
    const std::int64_t width = store[shared_fc_].shape[0];
    a.shared_fc = placement.empty({N, width});
    a.shared_act = placement.empty({N, width});
    linear_forward(hf, store[shared_fc_], Tensor(), a.shared_fc, operands_);
    if (config_.mlp == MlpKind::gelu) {
      gelu_forward(GeluArgs{}, a.shared_fc, a.shared_act);
    } else {
      a.shared_up = placement.empty({N, width});
      linear_forward(hf, store[shared_up_], Tensor(), a.shared_up, operands_);
      swiglu_forward(SwigluArgs{}, a.shared_fc, a.shared_up, a.shared_act);
    }
    Tensor shared_out = placement.empty({N, C});
    linear_forward(a.shared_act, store[shared_out_], Tensor(), shared_out, operands_);
    add_into(of, shared_out);
  }
}

void MoeLayer::backward(ParameterStore& store, const Tensor& h, MoeActivations& a, const Tensor& grad_out,
                        Tensor& grad_h, const AuxLossScale& loss_scale) const {
  const ops::Placement placement = ops::placement_of(h, "moe input");
  const MoeSpec& moe = config_.moe;
  const std::int64_t B = h.size(0), T = h.size(1), N = B * T, C = config_.n_embd, E = moe.num_experts;
  const std::int64_t k = moe.top_k, Fe = config_.expert_ffn(), R = a.rows();
  const RoutedTokens& r = a.routing;
  const Tensor hf = h.view({N, C}), go = grad_out.view({N, C});
  Tensor gh = grad_h.view({N, C}), none;
  // Combine: the rows' gradients and the combine weights' gradients.
  Tensor d_rows = placement.empty({R, C}), d_weight = placement.zeros({N, k});
  if (R > 0) combine_rows_backward(a.y_rows, r.slot, r.weight, go, d_rows, d_weight, kRoutedIndices);
  // Experts (on the rows this rank computed).
  const Tensor d_local = dispatch(d_rows, a);
  const std::int64_t n = a.exchange.local_rows();
  const std::vector<std::int64_t>& offsets = a.exchange.local_offsets;
  Tensor dx_local = placement.empty({n, C});
  if (n > 0) {
    Tensor d_act = placement.empty({n, Fe}), d_fc = placement.empty({n, Fe});
    grouped_matmul_backward({}, gemm_operand(a.act, operands_), weight_operand(store[experts_out_], operands_), offsets,
                            d_local, d_act, store[experts_out_].grad, none);
    const Tensor x = gemm_operand(a.x_rows, operands_);
    if (config_.mlp == MlpKind::gelu) {
      gelu_backward(GeluArgs{}, a.fc, d_act, d_fc);
      grouped_matmul_backward({}, x, weight_operand(store[experts_fc_], operands_), offsets, d_fc, dx_local,
                              store[experts_fc_].grad, none);
    } else {
      Tensor d_up = placement.empty({n, Fe});
      swiglu_backward(SwigluArgs{}, a.fc, a.up, d_act, d_fc, d_up);
      grouped_matmul_backward({}, x, weight_operand(store[experts_fc_], operands_), offsets, d_fc, dx_local,
                              store[experts_fc_].grad, none);
      grouped_matmul_backward({.accumulate_grad_x = true}, x, weight_operand(store[experts_up_], operands_), offsets,
                              d_up, dx_local, store[experts_up_].grad, none);
    }
  }
  const Tensor dx_rows = undispatch(dx_local, a);
  // dL/dh: each token's rows summed (the gather's backward) ...
  if (R > 0) {
    combine_rows_forward(dx_rows, r.slot, Tensor(), gh, kRoutedIndices);
  } else {
    zero(gh);
  }
  // ... plus the router's: the combine weights' and the auxiliary losses' gradients.
  Tensor d_logits = placement.empty({N, E});
  const auto whole_length = static_cast<double>(T * a.route.context_ranks);
  // ((coef T) s) either way: with the staged seed the op multiplies by s when it runs.
  const double seed = loss_scale.staged.defined() ? 1.0 : static_cast<double>(loss_scale.value);
  route_tokens_backward(a.route, a.logits, r.expert, d_weight,
                        static_cast<double>(moe.aux_loss_coef) * whole_length * seed,
                        static_cast<double>(moe.z_loss_coef) * seed, d_logits, a.context, loss_scale.staged);
  linear_backward(hf, store[router_].value, d_logits, gh, true, store[router_].grad, none);
  // ... plus the shared experts'.
  if (shared_fc_ != npos) {
    const std::int64_t width = store[shared_fc_].shape[0];
    Tensor d_act = placement.empty({N, width}), d_fc = placement.empty({N, width});
    linear_backward(a.shared_act, weight_operand(store[shared_out_], operands_), go, d_act, false,
                    store[shared_out_].grad, none, operands_);
    if (config_.mlp == MlpKind::gelu) {
      gelu_backward(GeluArgs{}, a.shared_fc, d_act, d_fc);
      linear_backward(hf, weight_operand(store[shared_fc_], operands_), d_fc, gh, true, store[shared_fc_].grad, none,
                      operands_);
    } else {
      Tensor d_up = placement.empty({N, width});
      swiglu_backward(SwigluArgs{}, a.shared_fc, a.shared_up, d_act, d_fc, d_up);
      linear_backward(hf, weight_operand(store[shared_fc_], operands_), d_fc, gh, true, store[shared_fc_].grad, none,
                      operands_);
      linear_backward(hf, weight_operand(store[shared_up_], operands_), d_up, gh, true, store[shared_up_].grad, none,
                      operands_);
    }
  }
  a.release();
}

}  // namespace myriad::nn
