// Collective algorithms over MPI point-to-point messages (internal header of MpiCommunicator).
//
// They run on the communicator's worker thread, one at a time, and return the exact bytes this
// rank handed to MPI (sent) and got from it (received). Chunks follow chunk_range(n, size, i).
// With S the buffer's bytes and c_i the bytes of chunk i, rank r sends:
//   ring_all_reduce      (S - c_r) + (S - c_{r+1})   reduce-scatter then all-gather, N-1 steps each
//   ring_reduce_scatter   S - c_r                    rank r ends with the reduced chunk r
//   ring_all_gather       S - c_{r+1}
//   tree_broadcast        S x (children of r in the binomial tree rooted at root)
//   pairwise_all_to_all_v sum of its send counts except the one to itself (copied locally)
// Every chunk of a ring reduction is reduced once, along the ring, and then forwarded, so every
// rank ends with bitwise identical values. Zero-length chunks post no message.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "mpi_link.h"
#include "myriad/core/dtype.h"
#include "myriad/distributed/communicator.h"

namespace myriad::distributed {

struct ByteCounts {
  std::int64_t sent = 0;
  std::int64_t received = 0;
};

// Receive / accumulate space owned by one communicator's worker: two slots that grow on demand
// and are never shrunk (uninitialised memory).
class ScratchBuffer {
 public:
  std::byte* get(int slot, std::size_t bytes) {
    if (capacity_[slot] < bytes) {
      data_[slot] = std::make_unique_for_overwrite<std::byte[]>(bytes);
      capacity_[slot] = bytes;
    }
    return data_[slot].get();
  }

 private:
  std::array<std::unique_ptr<std::byte[]>, 2> data_;
  std::array<std::size_t, 2> capacity_{};
};

// In place on `data` (n elements).
ByteCounts ring_all_reduce(const MpiLink& link, void* data, std::int64_t n, DType dtype, ReduceOp op,
                           ScratchBuffer& scratch);
// input: n elements; output: chunk_range(n, size, rank).size() elements. input is not modified.
ByteCounts ring_reduce_scatter(const MpiLink& link, const void* input, std::int64_t n, void* output, DType dtype,
                               ReduceOp op, ScratchBuffer& scratch);
// output: n elements; input: chunk `rank` of them (may already lie at its place inside output).
ByteCounts ring_all_gather(const MpiLink& link, const void* input, void* output, std::int64_t n,
                           std::size_t element_size);
// Binomial tree: each rank receives once from its parent, then sends to its children.
ByteCounts tree_broadcast(const MpiLink& link, void* data, std::int64_t bytes, int root);
// Pairwise exchange in size-1 steps: in step s rank r sends to r+s and receives from r-s.
// Counts are in elements; chunks lie back to back in rank order.
ByteCounts pairwise_all_to_all_v(const MpiLink& link, const void* input, const std::vector<std::int64_t>& send_counts,
                                 void* output, const std::vector<std::int64_t>& recv_counts, std::size_t element_size);

}  // namespace myriad::distributed
