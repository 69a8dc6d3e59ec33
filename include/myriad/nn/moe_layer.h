// MoeLayer — the mixture-of-experts MLP of one block: router, top-k dispatch with per-sequence
// capacity (ops/moe_routing.h), the rank's experts as grouped GEMMs, weighted combine, and
// optional shared experts that every token uses.
//
//   logits = h Wr^T (N, E)            router, f32 (also under mixed precision)
//   route  = route_tokens(logits)     where the model computes (no copy to the host)
//   rows   = h[source]                (R, C) the kept assignments in expert order (gather_rows)
//   [ep > 1: rows of other ranks' experts sent to them, this rank's received (exchange_rows)]
//   y_rows = expert MLP of each row   grouped_matmul: GELU: proj(gelu(fc x)); SwiGLU:
//                                     down(silu(gate x) * up x); experts have no biases
//   [ep > 1: results sent back]
//   out    = sum_j weight[t, j] y_rows[slot[t, j]]  (+ the shared experts' MLP of h)
// Row layout (the one rule, moe_row_layout): on a device with a capacity, padded — each expert a
// block of B min(capacity, T) rows, unused rows zero — so every size the host needs (the grouped
// GEMMs' offsets, the all-to-all's counts) is known without reading the device: no host wait in
// the layer. On the host, and dropless anywhere, compact — exactly the kept rows; the host then
// reads the per-expert counts: free on the host, and on a device the one read a dropless layer
// makes per forward (with ep > 1 its counts and the peers' in one transfer). Both layouts give
// every token the same rows' values; only the GEMMs' sizes (and so their rounding) differ.
// Parameters "blocks.<l>.moe.router.weight" (E, C), "…moe.shared.{fc|gate,up}.weight"
// (S Fe, C) and "…moe.shared.{proj|down}.weight" (C, S Fe) when shared_experts S > 0, then the
// experts "…moe.experts.{fc|gate,up}.weight" (E, Fe, C) and "…moe.experts.{proj|down}.weight"
// (E, C, Fe), registered last in the block and held as this rank's expert shard (dim 0: global
// expert indices [r E/ep, (r + 1) E/ep)), so checkpoints keep experts by global index.
// Weight-only INT8 serving (GptModel::attach_int8): the experts' and shared experts' weights
// compute from int8 (nn::grouped_linear_forward, nn::linear_forward); the router stays f32.
// Activations live in MoeActivations (sizes depend on the routing: allocated by forward, freed by
// backward). Gradient contract: parameter grads accumulate; grad_h is written.
// Context parallelism: the layer routes its rank's two chunks of every sequence as the whole
// sequence would be routed (capacity in whole-sequence token order, the load-balance loss over the
// whole sequence): count_route_choices, an all-gather of the counts over cp (choice_context), then
// route_tokens with them (ops/moe_routing.h). Expert gradients then sum over the expert-data group,
// which spans cp.
// Tensor parallelism splits only the dense parts of the model: every rank of a tp group holds the
// same MoE layer (replicated parameters, primary on tp rank 0, Parameter::tp_partial) and the
// block hands each rank its share of the micro-batch's sequences (B / tp whole sequences: the
// per-sequence capacity is unchanged); the block sums the ranks' outputs with its usual
// row-parallel reduction, and the parameters' gradients are summed over tp once per step
// (parallel::DataParallel). A batch that does not split (evaluation's last one) runs whole on every
// rank. Expert parallelism with the padded layout assumes every rank of the ep group routes the
// same number of tokens (the same micro-batch shape), as the trainer's batches are.
#pragma once

#include <memory>
#include <vector>

#include "myriad/nn/model_split.h"
#include "myriad/nn/parameter_store.h"
#include "myriad/nn/transformer_config.h"
#include "myriad/ops/moe_routing.h"
#include "myriad/ops/placement.h"

namespace myriad::nn {

// How this rank's rows reach its experts' ranks and come back (ep > 1; identity at ep 1).
struct ExpertExchange {
  std::vector<std::int64_t> send_rows, recv_rows;  // per rank
  std::vector<std::int64_t> local_offsets;         // (E/ep + 1) rows of each local expert
  Tensor regroup;  // (R_local) i32: received row of each local row (received: by source rank)
  Tensor ungroup;  // (R_received) i32: local row of each received row
  std::int64_t local_rows() const { return local_offsets.empty() ? 0 : local_offsets.back(); }
};

struct MoeActivations {
  Tensor stats;                       // set by the model before forward: the layer's totals
                                      // (MoeLayerStats::totals) the routing adds to, or undefined
  RouteArgs route;                    // how the tokens were routed (layout included)
  Tensor logits;                      // (N, E) router logits (the routing's backward reads them)
  Tensor context;                     // cp > 1: every cp rank's choice counts (ops/moe_routing.h)
  RoutedTokens routing;               // expert, weight, slot (N, k); source (R); counts (E)
  std::vector<std::int64_t> offsets;  // (E + 1) rows of each expert in `source` order
  ExpertExchange exchange;
  Tensor x_rows;                            // (R_local, C) rows this rank's experts compute
  Tensor fc, up, act;                       // (R_local, Fe)
  Tensor y_rows;                            // (R, C) expert outputs in this rank's expert order
  Tensor shared_fc, shared_up, shared_act;  // (N, S Fe)
  std::int64_t rows() const { return offsets.empty() ? 0 : offsets.back(); }
  void release();  // frees what forward allocated (after backward)
};

// Per MoE layer, summed over the micro-batches recorded since reset (telemetry): `totals` where
// the model computes (ops/moe_routing.h: assignments per expert, dropped, the load-balance and
// z-loss sums), read once when the metrics are collected; the shape-given counts on the host.
struct MoeLayerStats {
  int layer = 0;
  Tensor totals;  // (E + 3) f64: a row of the model's totals, set on the first recorded forward
  std::int64_t assignments = 0, sequences = 0, tokens = 0;
  // A forward's routing; a sequence split over cp ranks counts once (on cp rank 0).
  void count(std::int64_t routed_tokens, const RouteArgs& route);
  // `totals` read to the host (one transfer; empty before the first recorded micro-batch).
  std::vector<double> host_totals() const;
};

// The routing of a layer computing at `placement` with local sequences of `seq_len` tokens: the
// row layout (see above), the capacity of the whole sequence (cp seq_len tokens) and the cp place.
RouteArgs moe_route_args(const MoeSpec& spec, std::int64_t seq_len, const ops::Placement& placement,
                         const ContextParallel& cp);

// The scale of the auxiliary losses' gradients (the LM loss's gradient seed): `value`, or, when
// `staged` is defined (one f32 element where the pass runs: the seed a recorded CUDA graph's
// replays find staged), the value read there when the router's backward runs.
struct AuxLossScale {
  float value = 1.0f;
  Tensor staged;
};

class MoeLayer {
 public:
  MoeLayer(const TransformerConfig& config, const ModelSplit& split, int layer, ParameterStore& store);

  void set_gemm_operands(DType format) { operands_ = format; }
  // out (B, T, C) written from h (B, T, C).
  void forward(const ParameterStore& store, const Tensor& h, Tensor& out, MoeActivations& a) const;
  // grad_h written from grad_out; `loss_scale` scales the auxiliary losses like the LM loss.
  void backward(ParameterStore& store, const Tensor& h, MoeActivations& a, const Tensor& grad_out, Tensor& grad_h,
                const AuxLossScale& loss_scale) const;
  // The store index of the first expert parameter (the experts are the block's last parameters).
  std::size_t first_expert_parameter() const { return experts_fc_; }

 private:
  // The rows of each expert (a.offsets) and how they reach this rank's experts (a.exchange).
  void plan_rows(MoeActivations& a, const ops::Placement& placement, const Tensor& counts_pair) const;
  // cp > 1: the choice counts of every cp rank (count_route_choices, all-gathered on the stream).
  Tensor choice_context(const MoeActivations& a) const;
  Tensor dispatch(const Tensor& rows, const MoeActivations& a) const;     // rows in plan order -> local
  Tensor undispatch(const Tensor& local, const MoeActivations& a) const;  // local -> plan order

  TransformerConfig config_;
  ModelSplit split_;
  int layer_;
  DType operands_ = DType::f32;
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::size_t router_ = npos, shared_fc_ = npos, shared_up_ = npos, shared_out_ = npos;
  std::size_t experts_fc_ = npos, experts_up_ = npos, experts_out_ = npos;
  // Padded routing at ep > 1: the regroup / ungroup permutations depend on the rows per expert
  // block only, so they are made once per block size and kept where the layer computes (a micro-batch
  // recorded as a CUDA graph then uploads nothing). Read-only once made.
  struct PaddedPermutations {
    std::int64_t block_rows = -1;
    Tensor regroup, ungroup;
  };
  mutable PaddedPermutations padded_permutations_;
};

}  // namespace myriad::nn
