// Binomial-tree broadcast and pairwise all-to-all(v) over MPI_Isend/MPI_Irecv
// (see mpi_collectives.h).
//
// Broadcast: ranks are renumbered v = (r - root) mod N. Rank v > 0 receives from v minus its
// lowest set bit, then sends to v + 2^k for every 2^k below that bit with v + 2^k < N (the root
// sends to every power of two below N). Every rank but the root receives exactly once.
#include <cstring>

#include "mpi_collectives.h"

namespace myriad::distributed {

namespace {
constexpr int kExchangeTagBase = 2000;
int exchange_tag(CommOp op) { return kExchangeTagBase + static_cast<int>(op); }
}  // namespace

ByteCounts tree_broadcast(const MpiLink& link, void* data, std::int64_t bytes, int root) {
  ByteCounts counts;
  const int size = link.size;
  const int v = (link.rank - root + size) % size;
  const int tag = exchange_tag(CommOp::broadcast);
  int mask = 1;
  while (mask < size) {
    if (v & mask) {
      RequestSet parent(link, "broadcast");
      parent.recv(data, bytes, (v - mask + root) % size, tag);
      parent.wait_all();
      counts.received += bytes;
      break;
    }
    mask <<= 1;
  }
  RequestSet children(link, "broadcast");
  for (mask >>= 1; mask > 0; mask >>= 1) {
    if (v + mask < size) {
      children.send(data, bytes, (v + mask + root) % size, tag);
      counts.sent += bytes;
    }
  }
  children.wait_all();
  return counts;
}

ByteCounts pairwise_all_to_all_v(const MpiLink& link, const void* input, const std::vector<std::int64_t>& send_counts,
                                 void* output, const std::vector<std::int64_t>& recv_counts, std::size_t element_size) {
  ByteCounts counts;
  const int size = link.size, r = link.rank;
  const auto esize = static_cast<std::int64_t>(element_size);
  std::vector<std::int64_t> send_offset(size + 1, 0), recv_offset(size + 1, 0);
  for (int p = 0; p < size; ++p) {
    send_offset[p + 1] = send_offset[p] + send_counts[p] * esize;
    recv_offset[p + 1] = recv_offset[p] + recv_counts[p] * esize;
  }
  const char* in = static_cast<const char*>(input);
  char* out = static_cast<char*>(output);
  if (send_counts[r] > 0) std::memcpy(out + recv_offset[r], in + send_offset[r], send_counts[r] * esize);
  const int tag = exchange_tag(CommOp::all_to_all);
  for (int s = 1; s < size; ++s) {
    const int to = (r + s) % size, from = (r - s + size) % size;
    RequestSet requests(link, "all_to_all");
    requests.recv(out + recv_offset[from], recv_counts[from] * esize, from, tag);
    requests.send(in + send_offset[to], send_counts[to] * esize, to, tag);
    requests.wait_all();
    counts.sent += send_counts[to] * esize;
    counts.received += recv_counts[from] * esize;
  }
  return counts;
}

}  // namespace myriad::distributed
