// Communicator — collective and point-to-point communication within one group of ranks.
//
// One interface, several transports: MpiCommunicator (host tensors over OpenMPI),
// LoopbackCommunicator (a world of one), later NcclCommunicator (device tensors). Callers never
// know which one they hold.
//
// Semantics (all ranks of the group must issue the same collectives in the same order):
//   all_reduce(t)              t <- op over ranks of t (in place; every rank gets identical bits)
//   reduce_scatter(in, out)    out <- chunk `rank` of (op over ranks of in)
//   all_gather(in, out)        chunk r of out <- in of rank r
//   broadcast(t, root)         t <- t of root
//   send(t, peer) / recv(t, peer)   matched by (peer, tag) in issue order
//   all_to_all(in, out)        chunk p of out <- chunk `rank` of in of rank p (equal chunks)
//   all_to_all_v               the same with per-peer element counts (chunks back to back)
//   barrier()
// Chunks: a buffer of n elements split over `size` ranks is split by chunk_range(n, size, r) =
// [n*r/size, n*(r+1)/size), so chunks need not be equal (ZeRO shards of any parameter count).
// Tensors must be contiguous CPU tensors (f32, i32 or i64 for reductions; any dtype otherwise).
//
// Every *_async call returns at once with a handle; the tensors must stay alive and untouched
// until wait() returns. wait() rethrows the operation's error as myriad::Error naming the op,
// the group and the rank. Operations of one communicator complete in issue order, except that a
// run of consecutive send/recv operations is in flight together (like an NCCL group, so that a
// neighbour exchange — send to next, recv from prev on every rank — cannot deadlock) and its
// members may complete in any order among themselves.
//
// Statistics: per op, the number of calls, the bytes this rank handed to the transport (sent)
// and received, the seconds from issue to completion, and the seconds callers spent blocked in
// wait() — the exposed part that compute did not hide.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "myriad/core/tensor.h"

namespace myriad::distributed {

enum class ReduceOp { sum, max };

enum class CommOp { all_reduce = 0, reduce_scatter, all_gather, broadcast, send, recv, all_to_all, barrier };
inline constexpr int kCommOpCount = 8;
const char* comm_op_name(CommOp op);

struct ChunkRange {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
};
// [n*index/parts, n*(index+1)/parts).
ChunkRange chunk_range(std::int64_t n, int parts, int index);

struct CommOpStats {
  std::int64_t calls = 0;
  std::int64_t bytes_sent = 0;      // handed to the transport by this rank
  std::int64_t bytes_received = 0;  // received from the transport by this rank
  double seconds = 0.0;             // issue -> completion, summed over calls
  double wait_seconds = 0.0;        // exposed: time callers were blocked in wait(), or (stream-ordered
                                    // device works) the compute stream's stall waiting for them
  CommOpStats& operator+=(const CommOpStats& other);
};

struct CommStats {
  std::array<CommOpStats, kCommOpCount> ops{};
  CommOpStats& operator[](CommOp op) { return ops[static_cast<int>(op)]; }
  const CommOpStats& operator[](CommOp op) const { return ops[static_cast<int>(op)]; }
  CommOpStats total() const;
};

// Handle of one asynchronous operation.
class CommWork {
 public:
  virtual ~CommWork() = default;
  virtual void wait() = 0;  // blocks until complete; rethrows its error
  virtual bool completed() const = 0;
  // Orders the later work of the caller's compute stream after this operation without blocking
  // the host: a device communicator makes the stream wait for the operation's completion event and
  // checks it for errors at its complete_streamed(); a host communicator's work just waits.
  virtual void wait_on_stream() { wait(); }
  // For a work ordered on the compute stream (wait_on_stream) of a device communicator: how long
  // that stream sat waiting for it (0 when it arrived later than the work completed), known once
  // the stream has passed the wait (0 before, and for host works, whose waits block the host:
  // their callers time them).
  virtual double stream_stall_seconds() const { return 0.0; }
};
using WorkHandle = std::shared_ptr<CommWork>;

class Communicator {
 public:
  virtual ~Communicator() = default;

  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual const std::string& name() const = 0;  // "world", "dp", "tp", ... (used in messages)

  virtual WorkHandle all_reduce_async(Tensor tensor, ReduceOp op = ReduceOp::sum) = 0;
  virtual WorkHandle reduce_scatter_async(Tensor input, Tensor output, ReduceOp op = ReduceOp::sum) = 0;
  virtual WorkHandle all_gather_async(Tensor input, Tensor output) = 0;
  virtual WorkHandle broadcast_async(Tensor tensor, int root) = 0;
  virtual WorkHandle send_async(Tensor tensor, int peer, int tag = 0) = 0;
  virtual WorkHandle recv_async(Tensor tensor, int peer, int tag = 0) = 0;
  // Starts the run of send/recv issued since the last operation now, as one group: a caller that
  // overlaps an exchange with compute issued next calls it after the exchange's send / recv (a
  // device communicator otherwise launches the group when it is waited on, after that compute —
  // and orders it after that compute). A no-op where send / recv start when issued.
  virtual void start_point_to_point() {}
  virtual WorkHandle all_to_all_async(Tensor input, Tensor output) = 0;
  virtual WorkHandle all_to_all_v_async(Tensor input, std::vector<std::int64_t> send_counts, Tensor output,
                                        std::vector<std::int64_t> recv_counts) = 0;
  virtual WorkHandle barrier_async() = 0;

  // Ends every rank of the job (not only this group) after printing `reason`; never returns.
  [[noreturn]] virtual void abort(int exit_code, const std::string& reason) = 0;

  // A communicator over the ranks of this one that pass the same `color`, ordered by `key`.
  // Collective over this communicator.
  virtual std::unique_ptr<Communicator> split(int color, int key, const std::string& name) = 0;

  virtual CommStats stats() const = 0;
  virtual void reset_stats() = 0;
  // Counts the operations a CUDA graph replays once more: `recorded` holds their calls and bytes as
  // counted when the graph was recorded (train::MicroBatchGraph). A replay issues them without this
  // object, so their times — and how much of them was exposed — are not measured. Only a device
  // communicator's operations can be recorded; a host communicator has nothing to count.
  virtual void count_replayed(const CommStats& recorded) { (void)recorded; }

  // Waits on the host (with the usual error and timeout checks) for the operations ordered with
  // CommWork::wait_on_stream() since the last call, and releases their tensors. Nothing to do for
  // a host communicator.
  virtual void complete_streamed() {}

  // Stream-ordered forms (CommWork::wait_on_stream): on a device group the host does not wait.
  void all_reduce_on_stream(Tensor tensor, ReduceOp op = ReduceOp::sum) {
    all_reduce_async(std::move(tensor), op)->wait_on_stream();
  }
  void reduce_scatter_on_stream(Tensor input, Tensor output, ReduceOp op = ReduceOp::sum) {
    reduce_scatter_async(std::move(input), std::move(output), op)->wait_on_stream();
  }
  void all_gather_on_stream(Tensor input, Tensor output) {
    all_gather_async(std::move(input), std::move(output))->wait_on_stream();
  }

  // Blocking forms: the async call, then wait().
  void all_reduce(Tensor tensor, ReduceOp op = ReduceOp::sum) { all_reduce_async(std::move(tensor), op)->wait(); }
  void reduce_scatter(Tensor input, Tensor output, ReduceOp op = ReduceOp::sum) {
    reduce_scatter_async(std::move(input), std::move(output), op)->wait();
  }
  void all_gather(Tensor input, Tensor output) { all_gather_async(std::move(input), std::move(output))->wait(); }
  void broadcast(Tensor tensor, int root) { broadcast_async(std::move(tensor), root)->wait(); }
  void send(Tensor tensor, int peer, int tag = 0) { send_async(std::move(tensor), peer, tag)->wait(); }
  void recv(Tensor tensor, int peer, int tag = 0) { recv_async(std::move(tensor), peer, tag)->wait(); }
  void all_to_all(Tensor input, Tensor output) { all_to_all_async(std::move(input), std::move(output))->wait(); }
  void all_to_all_v(Tensor input, std::vector<std::int64_t> send_counts, Tensor output,
                    std::vector<std::int64_t> recv_counts) {
    all_to_all_v_async(std::move(input), std::move(send_counts), std::move(output), std::move(recv_counts))->wait();
  }
  void barrier() { barrier_async()->wait(); }
};

}  // namespace myriad::distributed
