// ContextParallelGroup — the model's ContextParallel (nn/context_parallel.h) over the cp
// communicator: ring shifts as a send to the next rank and a receive from the previous one, both
// asynchronous (MPI: host tensors; NCCL: device tensors), all-gathers as the communicator's.
#pragma once

#include "myriad/distributed/communicator.h"
#include "myriad/nn/context_parallel.h"

namespace myriad::parallel {

class ContextParallelGroup final : public nn::ContextParallel {
 public:
  explicit ContextParallelGroup(distributed::Communicator& cp) : cp_(cp) {}  // `cp` outlives this
  int size() const override { return cp_.size(); }
  int rank() const override { return cp_.rank(); }
  std::unique_ptr<nn::RingTransfer> ring_shift(const Tensor& send, Tensor& recv, int tag) const override;
  void all_gather(const Tensor& in, Tensor& out) const override;

 private:
  distributed::Communicator& cp_;
};

}  // namespace myriad::parallel
