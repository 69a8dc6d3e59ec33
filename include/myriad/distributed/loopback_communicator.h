// LoopbackCommunicator — a world of one (rank 0 of 1) for single-process runs, dry runs and
// tests. Every collective is the identity: all_reduce and broadcast leave the tensor as it is;
// reduce_scatter, all_gather and all_to_all(v) copy input to output (sizes checked as for any
// transport). send/recv would talk to this same rank and throw. Handles are returned completed.
// Statistics count calls; no byte ever reaches a transport, so the byte counters stay 0.
// Tensors may live on the host or on a backend's device (copies then run on the backend), so a
// device run's group of one is this class too.
#pragma once

#include <memory>
#include <mutex>
#include <string>

#include "myriad/distributed/communicator.h"

namespace myriad::distributed {

class LoopbackCommunicator final : public Communicator {
 public:
  explicit LoopbackCommunicator(std::string name = "world");

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }

  WorkHandle all_reduce_async(Tensor tensor, ReduceOp op = ReduceOp::sum) override;
  WorkHandle reduce_scatter_async(Tensor input, Tensor output, ReduceOp op = ReduceOp::sum) override;
  WorkHandle all_gather_async(Tensor input, Tensor output) override;
  WorkHandle broadcast_async(Tensor tensor, int root) override;
  WorkHandle send_async(Tensor tensor, int peer, int tag = 0) override;
  WorkHandle recv_async(Tensor tensor, int peer, int tag = 0) override;
  WorkHandle all_to_all_async(Tensor input, Tensor output) override;
  WorkHandle all_to_all_v_async(Tensor input, std::vector<std::int64_t> send_counts, Tensor output,
                                std::vector<std::int64_t> recv_counts) override;
  WorkHandle barrier_async() override;

  // Prints "[rank 0] fatal: reason" to stderr and ends the process with exit_code.
  [[noreturn]] void abort(int exit_code, const std::string& reason) override;
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

  CommStats stats() const override;
  void reset_stats() override;

 private:
  WorkHandle count(CommOp op);  // records one call, returns a completed handle

  std::string name_;
  mutable std::mutex stats_mutex_;
  CommStats stats_;
};

}  // namespace myriad::distributed
