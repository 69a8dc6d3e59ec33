// RingCommunicator — the flat ring's reductions on a private copy of the group, run by the
// ComposedCommunicator worker: what parallel.dp_reduce ring becomes with parallel.dp_reduce_exact
// (the exact f32 sums need the worker; plain ring reductions use the flat group directly).
// all_reduce and reduce_scatter are composed (integer sums for the exact encoding); the rest,
// all_gather included, is the flat group's.
#pragma once

#include <memory>
#include <string>

#include "myriad/distributed/composed_communicator.h"

namespace myriad::distributed {

class RingCommunicator final : public ComposedCommunicator {
 public:
  // Collective over `flat`.
  RingCommunicator(std::unique_ptr<Communicator> flat, bool exact_sums);
  ~RingCommunicator() override;

  std::string algorithm() const override { return "ring"; }

 protected:
  bool composes(CommOp op) const override { return op == CommOp::all_reduce || op == CommOp::reduce_scatter; }
  void run_all_reduce(Tensor& tensor, ReduceOp op) override { ring_->all_reduce(tensor, op); }
  void run_reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op) override {
    ring_->reduce_scatter(input, output, op);
  }

 private:
  Communicator* ring_ = nullptr;
};

}  // namespace myriad::distributed
