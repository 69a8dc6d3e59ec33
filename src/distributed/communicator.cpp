// Transport-independent parts of the Communicator interface: op names, the chunk rule shared by
// every transport (chunk_range) and statistics arithmetic.
#include "myriad/distributed/communicator.h"

#include "myriad/core/error.h"

namespace myriad::distributed {

const char* comm_op_name(CommOp op) {
  switch (op) {
    case CommOp::all_reduce:
      return "all_reduce";
    case CommOp::reduce_scatter:
      return "reduce_scatter";
    case CommOp::all_gather:
      return "all_gather";
    case CommOp::broadcast:
      return "broadcast";
    case CommOp::send:
      return "send";
    case CommOp::recv:
      return "recv";
    case CommOp::all_to_all:
      return "all_to_all";
    case CommOp::barrier:
      return "barrier";
  }
  return "?";
}

ChunkRange chunk_range(std::int64_t n, int parts, int index) {
  MYRIAD_CHECK(n >= 0, "chunk_range: negative element count " << n);
  MYRIAD_CHECK(parts >= 1, "chunk_range: " << parts << " parts (need >= 1)");
  MYRIAD_CHECK(index >= 0 && index < parts, "chunk_range: index " << index << " outside [0, " << parts << ")");
  // floor(n * i / p) without overflow: n = q * p + r  =>  n * i / p = q * i + floor(r * i / p).
  const std::int64_t q = n / parts, r = n % parts;
  auto bound = [&](std::int64_t i) { return q * i + r * i / parts; };
  return ChunkRange{bound(index), bound(index + 1)};
}

CommOpStats& CommOpStats::operator+=(const CommOpStats& other) {
  calls += other.calls;
  bytes_sent += other.bytes_sent;
  bytes_received += other.bytes_received;
  seconds += other.seconds;
  wait_seconds += other.wait_seconds;
  return *this;
}

CommOpStats CommStats::total() const {
  CommOpStats sum;
  for (const CommOpStats& op : ops) sum += op;
  return sum;
}

}  // namespace myriad::distributed
