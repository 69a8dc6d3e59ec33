// ModelSplit — which part of the model one rank holds: its tensor-parallel share and its
// pipeline layers.
//
// Tensor parallel (tp ranks, Megatron style): attention heads (and key/value heads) and the MLP
// width are split in contiguous blocks — rank r holds heads [r Hq/tp, (r+1) Hq/tp) — the
// qkv and MLP-in weights by output rows (column-parallel), the attention and MLP output
// projections by input columns (row-parallel, followed by an all-reduce), the vocabulary of the
// embedding and LM head by rows (vocab-parallel). Norms, position embeddings and the biases of
// row-parallel layers are replicated: every tp rank computes identical gradients for them
// (without sequence parallelism), so they need no communication.
// How activations cross the tp group is `tp` (nn/tensor_parallel.h: the region ops and vocabulary-
// parallel lookup and loss), made by the distributed layer from the layout; the model holds no
// communicator. Sequence parallel (TensorParallel::shards_rows, tp > 1): the residual stream, norms and their inputs
// are sharded over tp by rows of the flattened (B*T, C) token matrix — rank r holds tokens [r N/tp, (r+1) N/tp); the
// column-parallel input is all-gathered and the row-parallel output reduce-scattered instead of all-reduced; the
// replicated parameters' gradients are then partial sums over each rank's tokens and are all-reduced over tp. Expert
// parallel (ep ranks, MoE layers only): each rank holds E/ep experts of every MoE layer and the token rows routed to
// them arrive through `ep` (nn/expert_parallel.h). Context parallel (cp ranks): the rank holds two chunks of every
// sequence (nn/context_parallel.h); positions are global, attention runs as a ring through `cp` (nn/ring_attention.h).
// Pipeline: `chunks` lists, per model chunk (virtual stage) this rank runs, its global layer
// indices in order; `first_stage` (holds the embeddings: its chunk 0 is global stage 0) and
// `last_stage` (holds the final norm and head: its last chunk is the last global stage).
// Which part of each parameter the rank holds is the shard plan's (nn/shard_plan.h), applied at
// the rank's shard_coordinate(); the layers read their local widths from it (local_widths()).
#pragma once

#include <vector>

#include "myriad/nn/context_parallel.h"
#include "myriad/nn/expert_parallel.h"
#include "myriad/nn/shard_plan.h"
#include "myriad/nn/tensor_parallel.h"

namespace myriad::nn {

struct ModelSplit {
  const TensorParallel* tp = nullptr;    // not owned; nullptr = a group of one (serial_tensor_parallel)
  const ExpertParallel* ep = nullptr;    // not owned; nullptr = a group of one (serial_expert_parallel)
  const ContextParallel* cp = nullptr;   // not owned; nullptr = a group of one (serial_context_parallel)
  const ShardPlan* plan = nullptr;       // not owned; nullptr = transformer_shard_plan(sharded_sequence())
  std::vector<std::vector<int>> chunks;  // empty = one chunk with every layer
  bool first_stage = true;
  bool last_stage = true;

  const TensorParallel& tensor_parallel() const { return tp ? *tp : serial_tensor_parallel(); }
  int tp_size() const { return tensor_parallel().size(); }
  int tp_rank() const { return tensor_parallel().rank(); }
  bool sharded_sequence() const { return tensor_parallel().shards_rows(); }
  const ExpertParallel& expert_parallel() const { return ep ? *ep : serial_expert_parallel(); }
  int ep_size() const { return expert_parallel().size(); }
  int ep_rank() const { return expert_parallel().rank(); }
  const ContextParallel& context_parallel() const { return cp ? *cp : serial_context_parallel(); }
  int cp_size() const { return context_parallel().size(); }
  const ShardPlan& shard_plan() const { return plan ? *plan : transformer_shard_plan(sharded_sequence()); }
  ShardCoordinate shard_coordinate() const { return {tp_rank(), tp_size(), ep_rank(), ep_size()}; }
};

}  // namespace myriad::nn
