// LoopbackCommunicator: the identity collectives of a world of one (see loopback_communicator.h).
#include "myriad/distributed/loopback_communicator.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>

#include "myriad/core/error.h"
#include "myriad/distributed/comm_checks.h"
#include "myriad/ops/elementwise.h"

namespace myriad::distributed {

namespace {

class CompletedWork final : public CommWork {
 public:
  void wait() override {}
  bool completed() const override { return true; }
};

// Host tensors by memcpy; a backend's device tensors by its copy op.
void copy_bytes(const Tensor& input, const Tensor& output) {
  if (input.nbytes() == 0) return;
  if (input.device().is_cpu()) {
    std::memcpy(output.raw_data(), input.raw_data(), input.nbytes());
    return;
  }
  Tensor out = output;
  copy(input, out);
}

// Tensors are accepted on whichever device they live (the checks then compare against it).
DeviceType where(const Tensor& t) { return t.defined() ? t.device().type : DeviceType::cpu; }

}  // namespace

LoopbackCommunicator::LoopbackCommunicator(std::string name) : name_(std::move(name)) {}

WorkHandle LoopbackCommunicator::count(CommOp op) {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_[op].calls += 1;
  return std::make_shared<CompletedWork>();
}

WorkHandle LoopbackCommunicator::all_reduce_async(Tensor tensor, ReduceOp) {
  check_all_reduce_args(*this, tensor, where(tensor));
  return count(CommOp::all_reduce);
}

WorkHandle LoopbackCommunicator::reduce_scatter_async(Tensor input, Tensor output, ReduceOp) {
  check_reduce_scatter_args(*this, input, output, where(input));
  copy_bytes(input, output);
  return count(CommOp::reduce_scatter);
}

WorkHandle LoopbackCommunicator::all_gather_async(Tensor input, Tensor output) {
  check_all_gather_args(*this, input, output, where(input));
  copy_bytes(input, output);
  return count(CommOp::all_gather);
}

WorkHandle LoopbackCommunicator::broadcast_async(Tensor tensor, int root) {
  check_broadcast_args(*this, tensor, root, where(tensor));
  return count(CommOp::broadcast);
}

WorkHandle LoopbackCommunicator::send_async(Tensor tensor, int peer, int tag) {
  check_point_to_point_args("send", *this, tensor, peer, tag, std::numeric_limits<int>::max());
  MYRIAD_THROW(comm_context("send", *this) << ": unreachable");  // the check rejects every peer of a world of one
}

WorkHandle LoopbackCommunicator::recv_async(Tensor tensor, int peer, int tag) {
  check_point_to_point_args("recv", *this, tensor, peer, tag, std::numeric_limits<int>::max());
  MYRIAD_THROW(comm_context("recv", *this) << ": unreachable");
}

WorkHandle LoopbackCommunicator::all_to_all_async(Tensor input, Tensor output) {
  check_all_to_all_args(*this, input, output, where(input));
  copy_bytes(input, output);
  return count(CommOp::all_to_all);
}

WorkHandle LoopbackCommunicator::all_to_all_v_async(Tensor input, std::vector<std::int64_t> send_counts, Tensor output,
                                                    std::vector<std::int64_t> recv_counts) {
  check_all_to_all_v_args(*this, input, send_counts, output, recv_counts, where(input));
  copy_bytes(input, output);
  return count(CommOp::all_to_all);
}

WorkHandle LoopbackCommunicator::barrier_async() { return count(CommOp::barrier); }

void LoopbackCommunicator::abort(int exit_code, const std::string& reason) {
  std::fprintf(stderr, "[rank 0] fatal: %s\n", reason.c_str());
  std::fflush(stderr);
  std::_Exit(exit_code);
}

std::unique_ptr<Communicator> LoopbackCommunicator::split(int color, int, const std::string& name) {
  MYRIAD_CHECK(color >= 0, comm_context("split", *this) << ": colour " << color << " must be >= 0");
  return std::make_unique<LoopbackCommunicator>(name);
}

CommStats LoopbackCommunicator::stats() const {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  return stats_;
}

void LoopbackCommunicator::reset_stats() {
  std::lock_guard<std::mutex> lock(stats_mutex_);
  stats_ = CommStats{};
}

}  // namespace myriad::distributed
