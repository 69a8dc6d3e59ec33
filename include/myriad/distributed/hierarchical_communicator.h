// HierarchicalCommunicator — reductions of a group that spans nodes, as intra-node then
// inter-node collectives (parallel.dp_reduce: hierarchical).
//
// The group must be node-regular (node_layout.h): member d is local index i = d % L on node
// j = d / L, L members on each of N nodes. Private groups: intra = this node's L members (rank
// i), inter = the N members with local index i (rank j). With n elements, P = N * L:
//   all_reduce      intra reduce-scatter into chunk_range(n, L, i); inter all-reduce of that
//                   chunk; intra all-gather back. Bytes per rank 2S(L-1)/L within the node and
//                   2S(N-1)/(NL) across nodes — a flat ring's cross-node traffic divided by L.
//   reduce_scatter  the flat rule holds: rank d ends with chunk_range(n, P, d). The input is laid
//                   out as P zero-padded slots of m = ceil(n / P) elements, slot i*N + j holding
//                   the chunk of rank j*L + i; the intra reduce-scatter leaves local index i its
//                   N slots, the inter reduce-scatter leaves node j its own slot.
//   all_gather      the reverse (inter, then intra, then un-permuted), so ZeRO's shards are the
//                   same as under the flat ring.
// Every rank ends an all_reduce with identical bits (each chunk reduced once, then copied);
// the sum is association (i, then j) instead of the flat ring's, so f32 results equal the flat
// ones up to rounding (integers exactly) — bit for bit with exact sums (ops/exact_sum.h).
#pragma once

#include <memory>
#include <string>

#include "myriad/distributed/composed_communicator.h"
#include "myriad/distributed/node_layout.h"

namespace myriad::distributed {

class HierarchicalCommunicator final : public ComposedCommunicator {
 public:
  // Collective over `flat`. Throws unless grouping.nodes * grouping.per_node == flat->size().
  HierarchicalCommunicator(std::unique_ptr<Communicator> flat, NodeGrouping grouping, bool exact_sums = false);
  ~HierarchicalCommunicator() override;

  std::string algorithm() const override;
  const NodeGrouping& grouping() const { return grouping_; }

 protected:
  bool composes(CommOp) const override { return true; }
  void run_all_reduce(Tensor& tensor, ReduceOp op) override;
  void run_reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override;
  void run_all_gather(const Tensor& input, Tensor& output) override;

 private:
  std::int64_t slot_elements(std::int64_t n) const;  // m = ceil(n / P), at least 1
  int slot_of(int member) const;                     // (d % L) * N + d / L
  NodeGrouping grouping_;
  Communicator* intra_ = nullptr;
  Communicator* inter_ = nullptr;
};

}  // namespace myriad::distributed
