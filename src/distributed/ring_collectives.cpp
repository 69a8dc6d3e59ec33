// Ring reduce-scatter, all-gather and all-reduce over MPI_Isend/MPI_Irecv (see mpi_collectives.h).
//
// Indexing: in reduce-scatter step s (0 <= s < N-1) rank r sends chunk r-s-1 to r+1 and receives
// chunk r-s-2 from r-1, adding its own contribution; after the last step it holds the fully
// reduced chunk r (mod N). In all-gather step s rank r forwards chunk r-s and receives chunk
// r-s-1, so it starts with the chunk it owns.
#include <cstring>

#include "host_reduce.h"
#include "mpi_collectives.h"

namespace myriad::distributed {

namespace {

int wrap(int index, int size) { return ((index % size) + size) % size; }

struct Ring {
  const MpiLink& link;
  const char* op;
  int tag;
  std::int64_t n;
  std::size_t element_size;

  int next() const { return wrap(link.rank + 1, link.size); }
  int prev() const { return wrap(link.rank - 1, link.size); }
  ChunkRange chunk(int index) const { return chunk_range(n, link.size, wrap(index, link.size)); }
  std::int64_t offset(int index) const { return chunk(index).begin * static_cast<std::int64_t>(element_size); }
  std::int64_t bytes(int index) const { return chunk(index).size() * static_cast<std::int64_t>(element_size); }

  // One step: receive `recv_bytes` from prev while sending `send_bytes` to next.
  void step(const void* send, std::int64_t send_bytes, void* recv, std::int64_t recv_bytes, ByteCounts& counts) const {
    RequestSet requests(link, op);
    requests.recv(recv, recv_bytes, prev(), tag);
    requests.send(send, send_bytes, next(), tag);
    requests.wait_all();
    counts.sent += send_bytes;
    counts.received += recv_bytes;
  }

  std::int64_t largest_chunk_bytes() const {  // chunks hold floor(n/N) or ceil(n/N) elements
    return (n + link.size - 1) / link.size * static_cast<std::int64_t>(element_size);
  }

  // All-gather phase over `data` (n elements) where this rank already holds chunk `rank`.
  void all_gather_phase(char* data, ByteCounts& counts) const {
    const int r = link.rank;
    for (int s = 0; s < link.size - 1; ++s) {
      step(data + offset(r - s), bytes(r - s), data + offset(r - s - 1), bytes(r - s - 1), counts);
    }
  }
};

constexpr int kRingTagBase = 1000;
int ring_tag(CommOp op) { return kRingTagBase + static_cast<int>(op); }

}  // namespace

ByteCounts ring_all_reduce(const MpiLink& link, void* data, std::int64_t n, DType dtype, ReduceOp op,
                           ScratchBuffer& scratch) {
  ByteCounts counts;
  if (link.size == 1) return counts;
  const Ring ring{link, "all_reduce", ring_tag(CommOp::all_reduce), n, dtype_size(dtype)};
  char* bytes = static_cast<char*>(data);
  std::byte* received = scratch.get(0, static_cast<std::size_t>(ring.largest_chunk_bytes()));
  const int r = link.rank;
  for (int s = 0; s < link.size - 1; ++s) {
    const int send = r - s - 1, recv = r - s - 2;
    ring.step(bytes + ring.offset(send), ring.bytes(send), received, ring.bytes(recv), counts);
    char* mine = bytes + ring.offset(recv);
    reduce_into(mine, mine, received, ring.chunk(recv).size(), dtype, op);
  }
  ring.all_gather_phase(bytes, counts);
  return counts;
}

ByteCounts ring_reduce_scatter(const MpiLink& link, const void* input, std::int64_t n, void* output, DType dtype,
                               ReduceOp op, ScratchBuffer& scratch) {
  ByteCounts counts;
  const Ring ring{link, "reduce_scatter", ring_tag(CommOp::reduce_scatter), n, dtype_size(dtype)};
  const char* in = static_cast<const char*>(input);
  const int r = link.rank;
  if (link.size == 1) {
    if (ring.bytes(0) > 0) std::memmove(output, in, static_cast<std::size_t>(ring.bytes(0)));
    return counts;
  }
  const std::size_t largest = static_cast<std::size_t>(ring.largest_chunk_bytes());
  std::byte* received = scratch.get(0, largest);
  std::byte* partial = scratch.get(1, largest);  // the running reduction forwarded next step
  for (int s = 0; s < link.size - 1; ++s) {
    const int send = r - s - 1, recv = r - s - 2;
    const void* source = s == 0 ? static_cast<const void*>(in + ring.offset(send)) : partial;
    ring.step(source, ring.bytes(send), received, ring.bytes(recv), counts);
    void* target = s == link.size - 2 ? output : partial;  // the last chunk received is chunk r
    reduce_into(target, in + ring.offset(recv), received, ring.chunk(recv).size(), dtype, op);
  }
  return counts;
}

ByteCounts ring_all_gather(const MpiLink& link, const void* input, void* output, std::int64_t n,
                           std::size_t element_size) {
  ByteCounts counts;
  const Ring ring{link, "all_gather", ring_tag(CommOp::all_gather), n, element_size};
  char* out = static_cast<char*>(output);
  char* own = out + ring.offset(link.rank);
  if (own != input && ring.bytes(link.rank) > 0) {
    std::memmove(own, input, static_cast<std::size_t>(ring.bytes(link.rank)));
  }
  ring.all_gather_phase(out, counts);
  return counts;
}

}  // namespace myriad::distributed
