// MoeLayer — the mixture-of-experts MLP of one block: router, top-k dispatch with per-sequence
// capacity (nn/moe_routing.h), the rank's experts as grouped GEMMs, weighted combine, and
// optional shared experts that every token uses.
//
//   logits = h Wr^T (N, E)            router, f32 (also under mixed precision)
//   plan   = routing(logits)          on the host: the only values that leave the device
//   rows   = h[source]                (R, C) the kept assignments in expert order (gather_rows)
//   [ep > 1: rows of other ranks' experts sent to them, this rank's received (exchange_rows)]
//   y_rows = expert MLP of each row   grouped_matmul: GELU: proj(gelu(fc x)); SwiGLU:
//                                     down(silu(gate x) * up x); experts have no biases
//   [ep > 1: results sent back]
//   out    = sum_j weight[t, j] y_rows[slot[t, j]]  (+ the shared experts' MLP of h)
// Parameters "blocks.<l>.moe.router.weight" (E, C), "…moe.shared.{fc|gate,up}.weight"
// (S Fe, C) and "…moe.shared.{proj|down}.weight" (C, S Fe) when shared_experts S > 0, then the
// experts "…moe.experts.{fc|gate,up}.weight" (E, Fe, C) and "…moe.experts.{proj|down}.weight"
// (E, C, Fe), registered last in the block and held as this rank's expert shard (dim 0: global
// expert indices [r E/ep, (r + 1) E/ep)), so checkpoints keep experts by global index.
// Activations live in MoeActivations (sizes depend on the routing: allocated by forward, freed by
// backward). Gradient contract: parameter grads accumulate; grad_h is written.
// Tensor parallelism splits only the dense parts of the model: every rank of a tp group holds the
// same MoE layer (replicated parameters, primary on tp rank 0, Parameter::tp_partial) and the
// block hands each rank its share of the micro-batch's sequences (B / tp whole sequences: the
// per-sequence capacity is unchanged); the block sums the ranks' outputs with its usual
// row-parallel reduction, and the parameters' gradients are summed over tp once per step
// (parallel::DataParallel). A batch that does not split (evaluation's last one) runs whole on every
// rank.
#pragma once

#include <memory>
#include <vector>

#include "myriad/nn/model_split.h"
#include "myriad/nn/moe_routing.h"
#include "myriad/nn/parameter_store.h"
#include "myriad/nn/transformer_config.h"

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
  RoutingPlan plan;
  Tensor logits;        // (N, E) router logits (host copy: routing_backward reads them)
  Tensor slot, weight;  // (N, k) placed
  Tensor source;        // (R) placed
  ExpertExchange exchange;
  Tensor x_rows;                            // (R_local, C) rows this rank's experts compute
  Tensor fc, up, act;                       // (R_local, Fe)
  Tensor y_rows;                            // (R, C) expert outputs in this rank's expert order
  Tensor shared_fc, shared_up, shared_act;  // (N, S Fe)
  void release();                           // frees what forward allocated (after backward)
};

// Per MoE layer, summed over the micro-batches since reset (telemetry).
struct MoeLayerStats {
  int layer = 0;
  std::vector<std::int64_t> routed;  // (E) assignments per expert before dropping
  std::int64_t assignments = 0, dropped = 0;
  double aux_loss_sum = 0.0, z_loss_sum = 0.0;
  std::int64_t sequences = 0, tokens = 0;
  void add(const RoutingPlan& plan);
};

class MoeLayer {
 public:
  MoeLayer(const TransformerConfig& config, const ModelSplit& split, int layer, ParameterStore& store);

  void set_gemm_operands(DType format) { operands_ = format; }
  // out (B, T, C) written from h (B, T, C).
  void forward(const ParameterStore& store, const Tensor& h, Tensor& out, MoeActivations& a) const;
  // grad_h written from grad_out; `loss_scale` scales the auxiliary losses like the LM loss.
  void backward(ParameterStore& store, const Tensor& h, MoeActivations& a, const Tensor& grad_out, Tensor& grad_h,
                float loss_scale) const;
  // The store index of the first expert parameter (the experts are the block's last parameters).
  std::size_t first_expert_parameter() const { return experts_fc_; }

 private:
  void exchange_plan(MoeActivations& a, const ops::Placement& placement) const;
  Tensor dispatch(const Tensor& rows, const MoeActivations& a) const;     // rows in plan order -> local
  Tensor undispatch(const Tensor& local, const MoeActivations& a) const;  // local -> plan order

  TransformerConfig config_;
  ModelSplit split_;
  int layer_;
  DType operands_ = DType::f32;
  static constexpr std::size_t npos = static_cast<std::size_t>(-1);
  std::size_t router_ = npos, shared_fc_ = npos, shared_up_ = npos, shared_out_ = npos;
  std::size_t experts_fc_ = npos, experts_up_ = npos, experts_out_ = npos;
};

}  // namespace myriad::nn
