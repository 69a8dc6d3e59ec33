// NcclCommunicator — the Communicator interface (distributed/communicator.h) over NCCL, for tensors in
// one GPU's memory. Data, tensor and pipeline parallelism and ZeRO hold a Communicator&, so they
// run over NCCL for device tensors with no change to their code.
//
// Set-up (collective over `host`, a Communicator over the same ranks — MpiCommunicator in a job):
// host rank 0 creates the ncclUniqueId, `host` broadcasts it (MPI_Bcast underneath), every rank
// calls ncclCommInitRank on its DeviceContext's device. `host` must outlive this communicator;
// it is also how abort() ends the whole job.
//
// Streams: NCCL work runs on a stream of its own. Each operation first makes that stream wait for
// the work queued so far on the context's compute stream (an event), so it reads finished data,
// and records a completion event. *_async returns at once: compute queued afterwards overlaps the
// transfer. wait() blocks the host until the event has fired (polling ncclCommGetAsyncError, so a
// failed peer ends in an error, not a hang), then makes the compute stream wait for it too.
// wait_on_stream() only makes the compute stream wait (the host runs on, as it must inside a
// training step); the work is kept, with its tensors, until complete_streamed() waits for it on
// the host with the same checks (the trainer calls it once per step, after the update's reads).
// A peer that never joins such an operation stalls the stream: the step's next host read waits
// for it, and the ranks blocked in the step's host collectives report it (collective_watchdog.h).
// Exposed time (CommOpStats::wait_seconds): the host's time blocked in wait(); for a stream-ordered
// work, the compute stream's stall instead — from an event recorded where the stream starts
// waiting to the work's completion event (0 when the work was done first), counted once both
// have fired (at the wait, or at a later stats() call), never by waiting for them.
//
// Work handles hold their operation's tensors until the operation is complete, so device memory
// passed as a temporary cannot be reused by compute while NCCL may still read or write it.
//
// Semantics are the interface's, including its chunk rule (chunk_range): unequal chunks — which
// ncclReduceScatter / ncclAllGather cannot express — run as a group of ncclReduce / ncclBroadcast
// calls, one per chunk. send/recv issued back to back form one NCCL group (launched when another
// kind of operation is issued, when one of them is waited on, or at start_point_to_point), as the
// interface promises.
// NCCL matches point-to-point messages per (communicator, peer) in issue order and has no tags,
// so each tag in [0, p2p_tags) gets a communicator of its own (split at set-up).
//
// Host tensors: all_reduce, reduce_scatter, all_gather, broadcast and all_to_all(_v) of host tensors (scalars such
// as a gradient norm or token count, the per-token vectors of the vocabulary-parallel loss, MoE routing counts) go to
// the host communicator this one was built from, so code holding this communicator needs no
// second one for its host values. Both carry their operations in issue order, which every rank
// shares; statistics of those operations are the host communicator's.
//
// Errors: arguments are checked before anything is queued (comm_checks.h: contiguous tensors on
// this device). An NCCL or CUDA failure, a peer's asynchronous error, or a wait longer than
// `timeout_seconds` (0: no limit) aborts the NCCL communicators (ncclCommAbort) and throws
// myriad::Error naming the op, group and rank; the communicator refuses later operations.
//
// Hierarchical all-reduce (NcclOptions::hierarchy, N nodes x L members, member d = local index
// d % L on node d / L as node_layout.h groups them): two more NCCL communicators split from this
// one at set-up — intra (the node's L members) and inter (the N members of one local index). Of n
// elements, the first L m (m = n / L) go intra reduce-scatter (in place: local index i keeps
// chunk i of m), inter all-reduce of that chunk, intra all-gather (in place); the n - L m left
// over go one flat all-reduce. All on this communicator's stream in order, so nothing waits
// between the three, and the cross-node traffic is the flat ring's divided by L. Sums associate
// as (within the node, then across nodes), so f32 results equal the flat ones up to rounding.
// reduce_scatter and all_gather (ZeRO) stay flat: NCCL's own ring or tree, topology-aware.
//
// Exact sums (NcclOptions::exact_sums, parallel.dp_reduce_exact): every all_reduce and
// reduce_scatter that sums f32 device tensors runs the host's block fixed-point encoding
// (ops/exact_sum.h) on this communicator's stream — block exponents (kernel), their int32 max
// all-reduce, the int64 terms (kernel), their int64 all-reduce (hierarchical when the options
// say so) or reduce-scatter, the f32 values of the sums (kernel) — as one work: stream-ordered,
// nothing read back by the host, the result the same bits as the host's exact sums (ComposedCommunicator) of the
// same inputs over any group algorithm. Its two scratch buffers (int32 per 256 elements, int64
// per element) come from the context's caching allocator and are held by the work until it is
// complete. Bytes: the ring traffic of the exponents plus the int64 terms. Other dtypes, max and
// host tensors run as usual (the host group sums exactly itself when it was built so). A split
// communicator sums as NCCL does, like a split of the host's exact group.
//
// Statistics: calls, seconds between the stream events (issue -> completion on the GPU), seconds
// the host was blocked in wait(); NCCL does not report bytes moved, so bytes are the ring
// algorithm's per-rank traffic ((n-1)/n of the buffer per reduce-scatter or all-gather phase).
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "myriad/cuda/device_context.h"
#include "myriad/distributed/communicator.h"
#include "myriad/distributed/node_layout.h"

namespace myriad::distributed {

struct NcclOptions {
  int p2p_tags = 2;              // send/recv tags usable (the pipeline uses 0 and 1)
  double timeout_seconds = 0.0;  // a wait() longer than this aborts; 0 = wait forever
  // nodes x per_node > 1 each: all_reduce as intra-node reduce-scatter, inter-node all-reduce,
  // intra-node all-gather (parallel.dp_reduce hierarchical; see above). Else flat.
  NodeGrouping hierarchy{};
  // f32 sums of device tensors (all_reduce, reduce_scatter) exact, as above.
  bool exact_sums = false;
};

class NcclCommunicator final : public distributed::Communicator {
 public:
  // Collective over `host` (see above). The name is used in messages ("dp", "tp", ...).
  NcclCommunicator(distributed::Communicator& host, cuda::DeviceContext& context, NcclOptions options = {});
  ~NcclCommunicator() override;
  NcclCommunicator(const NcclCommunicator&) = delete;
  NcclCommunicator& operator=(const NcclCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }

  distributed::WorkHandle all_reduce_async(Tensor tensor,
                                           distributed::ReduceOp op = distributed::ReduceOp::sum) override;
  distributed::WorkHandle reduce_scatter_async(Tensor input, Tensor output,
                                               distributed::ReduceOp op = distributed::ReduceOp::sum) override;
  distributed::WorkHandle all_gather_async(Tensor input, Tensor output) override;
  distributed::WorkHandle broadcast_async(Tensor tensor, int root) override;
  distributed::WorkHandle send_async(Tensor tensor, int peer, int tag = 0) override;
  distributed::WorkHandle recv_async(Tensor tensor, int peer, int tag = 0) override;
  // Launches the pending send/recv now as one NCCL group, ordered after the compute stream's work
  // issued so far.
  void start_point_to_point() override;
  distributed::WorkHandle all_to_all_async(Tensor input, Tensor output) override;
  distributed::WorkHandle all_to_all_v_async(Tensor input, std::vector<std::int64_t> send_counts, Tensor output,
                                             std::vector<std::int64_t> recv_counts) override;
  distributed::WorkHandle barrier_async() override;

  [[noreturn]] void abort(int exit_code, const std::string& reason) override;
  // ncclCommSplit of this communicator plus the same split of the host communicator.
  std::unique_ptr<distributed::Communicator> split(int color, int key, const std::string& name) override;

  distributed::CommStats stats() const override;
  void reset_stats() override;
  void count_replayed(const distributed::CommStats& recorded) override;
  void complete_streamed() override;

  cudaStream_t stream() const { return stream_; }
  cuda::DeviceContext& context() const { return context_; }
  double timeout_seconds() const { return options_.timeout_seconds; }

  // The node grouping its all-reduce runs hierarchically over; {1, size} when flat.
  NodeGrouping hierarchy() const;

  struct Impl;  // NCCL handles and in-flight bookkeeping (nccl_communicator.cpp)

 private:
  // A communicator made by split(): owns its host communicator.
  NcclCommunicator(std::unique_ptr<distributed::Communicator> owned_host, cuda::DeviceContext& context,
                   NcclOptions options, std::unique_ptr<Impl> impl);
  bool sums_exactly(const Tensor& tensor, distributed::ReduceOp op) const;
  distributed::WorkHandle exact_all_reduce(Tensor tensor);
  distributed::WorkHandle exact_reduce_scatter(Tensor input, Tensor output);
  // Inside a launch: an all-reduce of `count` elements at `data` in place, flat or hierarchical;
  // a reduce-scatter of `count` elements into this rank's chunk_range (unequal chunks as reduces).
  void queue_all_reduce(void* data, std::int64_t count, DType dtype, distributed::ReduceOp op);
  void queue_reduce_scatter(const void* input, void* output, std::int64_t count, DType dtype, distributed::ReduceOp op);
  // Per-rank bytes of an all-reduce of `count` elements of `element` bytes (flat or hierarchical).
  std::int64_t all_reduce_traffic(std::int64_t count, std::int64_t element) const;

  std::unique_ptr<distributed::Communicator> owned_host_;
  distributed::Communicator* host_;
  cuda::DeviceContext& context_;
  NcclOptions options_;
  std::string name_;
  int rank_ = 0;
  int size_ = 1;
  cudaStream_t stream_ = nullptr;
  std::unique_ptr<Impl> impl_;
};

}  // namespace myriad::distributed
