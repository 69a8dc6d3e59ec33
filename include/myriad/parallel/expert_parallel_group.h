// ExpertParallelGroup — the model's ExpertParallel (nn/expert_parallel.h) over the ep
// communicator: the routing counts by an all-to-all of host i64 tensors, the token rows by an
// all-to-all-v of whatever the communicator carries (MPI: host tensors; NCCL: device tensors).
// Rows are (n, C) contiguous f32; counts in rows are turned into element counts here.
#pragma once

#include "myriad/distributed/communicator.h"
#include "myriad/nn/expert_parallel.h"

namespace myriad::parallel {

class ExpertParallelGroup final : public nn::ExpertParallel {
 public:
  explicit ExpertParallelGroup(distributed::Communicator& ep) : ep_(ep) {}  // `ep` outlives this
  int size() const override { return ep_.size(); }
  int rank() const override { return ep_.rank(); }
  void exchange_counts(const Tensor& in, Tensor& out) const override;
  void exchange_rows(const Tensor& in, const std::vector<std::int64_t>& send_rows, Tensor& out,
                     const std::vector<std::int64_t>& recv_rows) const override;

 private:
  distributed::Communicator& ep_;
};

}  // namespace myriad::parallel
