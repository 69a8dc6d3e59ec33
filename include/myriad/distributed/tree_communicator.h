// TreeCommunicator — all-reduce as a binomial-tree reduction to member 0 followed by a
// binomial-tree broadcast (parallel.dp_reduce: tree).
//
// Reduction: in round k (mask = 2^k) a member whose bit k is set sends its partial result to
// member - mask and leaves; the others receive from member + mask (when it exists) and add. After
// ceil(log2 P) rounds member 0 holds the result, which the broadcast returns to everyone — so
// every member ends with identical bits. Cost: 2 ceil(log2 P) message latencies against the
// ring's 2(P - 1), but whole buffers travel each round (about 2 S log2 P bytes through member 0
// against the ring's 2 S): tree pays off for small, latency-bound reductions (scalars, tiny
// models, many ranks). reduce_scatter and all_gather stay the flat group's rings (with exact sums,
// the integer reduce-scatter runs on the private copy's ring).
#pragma once

#include <memory>
#include <string>

#include "myriad/distributed/composed_communicator.h"

namespace myriad::distributed {

class TreeCommunicator final : public ComposedCommunicator {
 public:
  // Collective over `flat`.
  explicit TreeCommunicator(std::unique_ptr<Communicator> flat, bool exact_sums = false);
  ~TreeCommunicator() override;

  std::string algorithm() const override { return "tree"; }

 protected:
  bool composes(CommOp op) const override { return op == CommOp::all_reduce; }
  void run_all_reduce(Tensor& tensor, ReduceOp op) override;
  void run_reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override {
    tree_->reduce_scatter(input, output, op);
  }

 private:
  Communicator* tree_ = nullptr;
};

}  // namespace myriad::distributed
