// TreeCommunicator: binomial reduce to member 0, then binomial broadcast (see tree_communicator.h).
#include "myriad/distributed/tree_communicator.h"

#include "host_reduce.h"

namespace myriad::distributed {

TreeCommunicator::TreeCommunicator(std::unique_ptr<Communicator> flat, bool exact_sums)
    : ComposedCommunicator(std::move(flat), exact_sums) {
  tree_ = &add_level("tree", this->flat().split(0, rank(), name() + ".tree"));
  start();
}

TreeCommunicator::~TreeCommunicator() { stop(); }

void TreeCommunicator::run_all_reduce(Tensor& tensor, ReduceOp op) {
  const int me = rank(), members = size();
  Tensor received = Tensor::empty(tensor.shape(), tensor.dtype());
  for (int mask = 1; mask < members; mask <<= 1) {
    if (me & mask) {
      tree_->send(tensor, me - mask);
      break;
    }
    if (me + mask < members) {
      tree_->recv(received, me + mask);
      reduce_into(tensor.raw_data(), tensor.raw_data(), received.raw_data(), tensor.numel(), tensor.dtype(), op);
    }
  }
  tree_->broadcast(tensor, 0);
}

}  // namespace myriad::distributed
