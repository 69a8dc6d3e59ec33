// DryRunCommunicator: a rank and a size, no transport (see dry_run_communicator.h).
#include "myriad/distributed/dry_run_communicator.h"

#include "myriad/core/error.h"

namespace myriad::distributed {

DryRunCommunicator::DryRunCommunicator(std::string name, int rank, int size)
    : name_(std::move(name)), rank_(rank), size_(size) {
  MYRIAD_CHECK(size >= 1 && rank >= 0 && rank < size,
               "dry run: group " << name_ << " rank " << rank << " of " << size << " is not a rank of the group");
}

void DryRunCommunicator::refuse(const char* call) const {
  MYRIAD_THROW("dry run: " << call << " on group " << name_ << " (rank " << rank_ << " of " << size_
                           << "): a dry run builds one rank's part of the layout and does not communicate");
}

WorkHandle DryRunCommunicator::all_reduce_async(Tensor, ReduceOp) { refuse("all_reduce"); }
WorkHandle DryRunCommunicator::reduce_scatter_async(Tensor, Tensor, ReduceOp) { refuse("reduce_scatter"); }
WorkHandle DryRunCommunicator::all_gather_async(Tensor, Tensor) { refuse("all_gather"); }
WorkHandle DryRunCommunicator::broadcast_async(Tensor, int) { refuse("broadcast"); }
WorkHandle DryRunCommunicator::send_async(Tensor, int, int) { refuse("send"); }
WorkHandle DryRunCommunicator::recv_async(Tensor, int, int) { refuse("recv"); }
WorkHandle DryRunCommunicator::all_to_all_async(Tensor, Tensor) { refuse("all_to_all"); }
WorkHandle DryRunCommunicator::all_to_all_v_async(Tensor, std::vector<std::int64_t>, Tensor,
                                                  std::vector<std::int64_t>) {
  refuse("all_to_all_v");
}
WorkHandle DryRunCommunicator::barrier_async() { refuse("barrier"); }
void DryRunCommunicator::abort(int, const std::string& reason) { MYRIAD_THROW("dry run: " << reason); }
std::unique_ptr<Communicator> DryRunCommunicator::split(int, int, const std::string&) { refuse("split"); }

}  // namespace myriad::distributed
