// ExpertParallelGroup: the two exchanges of an MoE layer as all-to-alls on the ep communicator.
#include "myriad/parallel/expert_parallel_group.h"

#include "myriad/core/error.h"

namespace myriad::parallel {

// Both stream-ordered: on a device group the host does not wait (the layer reads what it needs).
void ExpertParallelGroup::exchange_counts(const Tensor& in, Tensor& out) const {
  ep_.all_to_all_async(in, out)->wait_on_stream();
}

void ExpertParallelGroup::exchange_rows(const Tensor& in, const std::vector<std::int64_t>& send_rows, Tensor& out,
                                        const std::vector<std::int64_t>& recv_rows) const {
  MYRIAD_CHECK(in.dim() == 2 && out.dim() == 2 && in.size(1) == out.size(1),
               "expert exchange: rows " << in.describe() << " and " << out.describe() << " must be (n, C) alike");
  const std::int64_t C = in.size(1);
  std::vector<std::int64_t> send(send_rows.size()), recv(recv_rows.size());
  for (std::size_t p = 0; p < send.size(); ++p) send[p] = send_rows[p] * C;
  for (std::size_t p = 0; p < recv.size(); ++p) recv[p] = recv_rows[p] * C;
  ep_.all_to_all_v_async(in.view({in.numel()}), send, out.view({out.numel()}), recv)->wait_on_stream();
}

}  // namespace myriad::parallel
