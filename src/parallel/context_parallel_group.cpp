// ContextParallelGroup: ring shifts and all-gathers over the cp communicator, both stream-ordered on
// a device group (the host never waits on NCCL inside a step).
#include "myriad/parallel/context_parallel_group.h"

namespace myriad::parallel {

namespace {

// The send to the next rank and the receive from the previous one of one ring shift.
class RingWork final : public nn::RingTransfer {
 public:
  RingWork(distributed::WorkHandle send, distributed::WorkHandle recv)
      : send_(std::move(send)), recv_(std::move(recv)) {}
  void wait() override {  // stream-ordered on a device group (nn::RingTransfer)
    recv_->wait_on_stream();
    send_->wait_on_stream();
  }

 private:
  distributed::WorkHandle send_, recv_;
};

}  // namespace

std::unique_ptr<nn::RingTransfer> ContextParallelGroup::ring_shift(const Tensor& send, Tensor& recv, int tag) const {
  const int n = cp_.size(), r = cp_.rank();
  MYRIAD_CHECK(send.shape() == recv.shape() && send.is_contiguous() && recv.is_contiguous(),
               "cp ring shift: send " << send.describe() << " and recv " << recv.describe()
                                      << " must be contiguous and of one shape");
  distributed::WorkHandle out = cp_.send_async(send, (r + 1) % n, tag);
  distributed::WorkHandle in = cp_.recv_async(recv, (r - 1 + n) % n, tag);
  cp_.start_point_to_point();  // in flight while the caller computes on the blocks it holds
  return std::make_unique<RingWork>(std::move(out), std::move(in));
}

// Stream-ordered on a device group (the block selection's means stay on the device: no host wait);
// a host communicator's wait_on_stream is its wait.
void ContextParallelGroup::all_gather(const Tensor& in, Tensor& out) const {
  cp_.all_gather_async(in, out)->wait_on_stream();
}

}  // namespace myriad::parallel
