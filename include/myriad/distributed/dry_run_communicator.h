// DryRunCommunicator — one rank's place in a group that does not exist: the rank and size a dry
// run (train/dry_run.h) builds rank r's part of a layout with, on one process. Construction code
// reads rank() and size() (shard ranges, pipeline stage, expert share); nothing may communicate:
// every collective, point-to-point, split and abort throws myriad::Error naming the group and
// the call. Statistics stay empty.
#pragma once

#include <string>

#include "myriad/distributed/communicator.h"

namespace myriad::distributed {

class DryRunCommunicator final : public Communicator {
 public:
  DryRunCommunicator(std::string name, int rank, int size);

  int rank() const override { return rank_; }
  int size() const override { return size_; }
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
  [[noreturn]] void abort(int exit_code, const std::string& reason) override;
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;
  CommStats stats() const override { return {}; }
  void reset_stats() override {}

 private:
  [[noreturn]] void refuse(const char* call) const;

  std::string name_;
  int rank_ = 0, size_ = 1;
};

}  // namespace myriad::distributed
