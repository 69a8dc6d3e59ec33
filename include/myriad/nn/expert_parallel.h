// ExpertParallel — the model's view of its expert-parallel group: the ranks that split an MoE
// layer's experts between them (rank r holds experts [r E/ep, (r + 1) E/ep)) and exchange token
// rows with all-to-all. Like TensorParallel, the model never names a communicator: the serial
// implementation (a group of one) never communicates, and the parallel one lives in the
// distributed layer (parallel/expert_parallel_group.h).
//   exchange_counts(in, out)   i64, equal chunks: chunk p of out <- chunk `rank` of in on rank p
//   exchange_rows(in, send_rows, out, recv_rows)
//                              rows of in (back to back: send_rows[p] rows for rank p) go to their
//                              rank; out receives recv_rows[p] rows from each rank p, back to back;
//                              tensors live where the model computes (host or device)
// Both are collective over the group; ranks call them in one order.
#pragma once

#include <cstdint>
#include <vector>

#include "myriad/core/tensor.h"

namespace myriad::nn {

class ExpertParallel {
 public:
  virtual ~ExpertParallel() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual void exchange_counts(const Tensor& in, Tensor& out) const = 0;
  virtual void exchange_rows(const Tensor& in, const std::vector<std::int64_t>& send_rows, Tensor& out,
                             const std::vector<std::int64_t>& recv_rows) const = 0;
};

// A group of one: experts all local, nothing exchanged; stateless.
const ExpertParallel& serial_expert_parallel();

}  // namespace myriad::nn
