// ContextParallel — the model's view of its context-parallel group (cp ranks, Megatron's "cp").
//
// The sequence of T positions is cut into 2 cp chunks of c = T / (2 cp) positions; rank r holds
// chunks r and 2 cp - 1 - r (causal load balancing: one early, one late chunk, so every rank has
// the same attention work) as rows [0, c) and [c, 2 c) of its local (B, 2 c) batch. Per-token
// layers (embeddings, norms, MLP, loss) run on the local rows unchanged; positions follow the
// global index (global_position); attention is ring attention over the group (nn/ring_attention.h).
// Like TensorParallel, the model never names a communicator: the serial implementation (a group of
// one) never communicates, the parallel one lives in the distributed layer
// (parallel/context_parallel_group.h).
//   ring_shift(send, recv, tag)  starts sending `send` to the next rank of the ring and receiving
//                                `recv` (same shape) from the previous one; neither tensor may be
//                                touched until the returned transfer's wait()
//   all_gather(in, out)          every rank's `in`, back to back along dim 0 of out, in rank order
//                                (stream-ordered on a device group: out is ready for the work
//                                queued after it, the host does not wait)
// Tensors live where the model computes (host or device). Collective: ranks call in one order.
#pragma once

#include <cstdint>
#include <memory>

#include "myriad/core/tensor.h"

namespace myriad::nn {

class RingTransfer {
 public:
  virtual ~RingTransfer() = default;
  // Both directions complete for what runs next: on the host, done; on a GPU, the compute stream
  // waits for them and the host runs on (errors surface at the group's complete_streamed()).
  virtual void wait() = 0;
};

class ContextParallel {
 public:
  virtual ~ContextParallel() = default;
  virtual int size() const = 0;
  virtual int rank() const = 0;
  virtual std::unique_ptr<RingTransfer> ring_shift(const Tensor& send, Tensor& recv, int tag) const = 0;
  virtual void all_gather(const Tensor& in, Tensor& out) const = 0;

  // The global index of this rank's chunk `half` (0: the early one, 1: the late one).
  std::int64_t chunk_index(int half) const { return half == 0 ? rank() : 2 * size() - 1 - rank(); }
  // The global position of local row `row` of a local sequence of `local_len` = 2 c rows.
  std::int64_t global_position(std::int64_t row, std::int64_t local_len) const {
    const std::int64_t c = local_len / 2;
    if (size() == 1) return row;
    return chunk_index(row < c ? 0 : 1) * c + row % c;
  }
  // local (B, T / size()) <- this rank's two chunks of every sequence of `whole` (B, T).
  void take_chunks(const Tensor& whole, Tensor& local) const {
    const std::int64_t c = whole.size(1) / (2 * size());
    for (int half = 0; half < 2; ++half) {
      const std::int64_t from = chunk_index(half) * c;
      local.slice(1, half * c, (half + 1) * c).copy_from(whole.slice(1, from, from + c));
    }
  }
};

// A group of one: the whole sequence local, nothing exchanged; stateless.
const ContextParallel& serial_context_parallel();

}  // namespace myriad::nn
