// CompressedReduceScatter — the reduce-scatter of one f32 buffer per rank over a group, sent
// compressed with error feedback on the sender (int8 / top-k gradient compression with ZeRO 1-3).
//
// With P ranks, the buffer of n elements is split by the chunk rule (chunk_range(n, P, p), the
// rule of Communicator::reduce_scatter and of ZeroLayout's owned chunks); rank p owns chunk p.
// One reduce_scatter(x, out):
//   sender  y = x + e; each chunk p of y is encoded, e = y - decode(encode(y)) (what the code
//           lost is added to the next call's input); chunk p goes to rank p (all_to_all_v).
//   owner   out = the decoded chunks of its shard summed in rank order.
// There is no second phase: each rank needs only the sum of its own chunk (ZeRO updates only its
// shard, and the updated values are gathered exactly), so the server-side error of CompressedSum
// does not arise. The error buffer holds n floats — the whole buffer, not the shard: each rank
// sends a compressed contribution to every element, and what the code lost is the sender's.
// Every owner decodes the same bytes in the same order, so the result does not depend on which
// device decodes. Placement and streams as CompressedSum (ops/compression.h, all_to_all_v ordered
// on the stream: no host wait on a device group). The error buffer is rank state, not
// checkpointed.
#pragma once

#include <cstdint>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/distributed/communicator.h"
#include "myriad/ops/compression.h"
#include "myriad/ops/placement.h"

namespace myriad::distributed {

class CompressedReduceScatter {
 public:
  CompressedReduceScatter(Communicator& group, std::int64_t elements, CompressionSpec spec,
                          ops::Placement placement = {});

  // out (this rank's chunk of `elements`) <- the decoded compressed sum over the group; collective.
  void reduce_scatter(const Tensor& x, Tensor& out);
  std::int64_t bytes_sent_per_call() const;
  Tensor& error() { return error_; }

 private:
  Communicator& group_;
  std::int64_t n_;
  CompressionSpec spec_;
  ops::Placement placement_;
  std::vector<std::int64_t> chunk_bytes_;  // encoded bytes of each rank's chunk
  Tensor error_;                           // n floats
  Tensor to_owners_, at_owner_;            // i8 codes: every chunk out, this chunk from every rank
};

}  // namespace myriad::distributed
