// MpiCommunicator — the Communicator of host (CPU) tensors over MPI.
//
// Ownership: it owns two MPI communicators over the same ranks (one for collectives, one for
// send/recv, so user tags never meet internal ones), both with MPI_ERRORS_RETURN; every MPI
// return code is checked and turned into myriad::Error naming the op, the group, the rank and
// MPI's message. After an MPI error inside an operation the communicator is unusable: later
// operations fail at once with the first error (they cannot hang on a half-finished exchange).
//
// Progress: one worker thread per communicator. Every *_async call checks its arguments (bad
// ones throw at the call site and leave the group usable), enqueues the op and returns a handle.
// The worker takes ops in issue order:
//   - a collective (all_reduce, reduce_scatter, all_gather, broadcast, all_to_all(v), barrier,
//     split) starts after every earlier op completed and runs to completion;
//   - send/recv are posted (MPI_Isend / MPI_Irecv) and stay in flight while the worker posts the
//     following send/recv ops, so a run of consecutive send/recv ops behaves like an NCCL group:
//     a neighbour exchange (send to next, recv from prev on every rank) cannot deadlock. Ops of
//     such a run may complete in any order among themselves.
// The caller must issue ops from one thread (or order them itself): all ranks must see the
// same collectives in the same order.
//
// Algorithms (so that the bytes each rank sends are known exactly and counted): ring
// reduce-scatter / all-gather / all-reduce, binomial-tree broadcast, pairwise all-to-all(v) —
// all over MPI point-to-point messages of at most Options::max_message_bytes each; barrier is
// MPI_Barrier (0 bytes). Reductions: f32, i32, i64; sum and max. Every rank ends an all_reduce
// with bitwise identical values.
//
// Progress: collectives are numbered #1, #2, … in issue order (the same on every rank) and the
// number, op and start time of the one the worker runs are published in progress() for the
// CollectiveWatchdog (collective_watchdog.h).
//
// Lifetime: destroy every MpiCommunicator before MPI_Finalize (before the MpiRuntime that
// initialised MPI). The destructor drains the queue (waits for every issued op, including
// send/recv whose peer must still match them) and joins the worker.
#pragma once

#include <mpi.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "myriad/distributed/collective_watchdog.h"
#include "myriad/distributed/communicator.h"

namespace myriad::distributed {

struct StatsBlock;
class MpiWork;
struct MpiLink;
class ScratchBuffer;
struct ByteCounts;

struct MpiCommunicatorOptions {
  // Largest single MPI message; bigger transfers go as consecutive pieces (MPI counts are int).
  std::int64_t max_message_bytes = std::int64_t{1} << 30;
};

class MpiCommunicator final : public Communicator {
 public:
  using Options = MpiCommunicatorOptions;

  // Takes ownership of `comm` (freed by the destructor). Collective over `comm`.
  MpiCommunicator(MPI_Comm comm, std::string name, Options options = {});
  // A communicator over a duplicate of `comm` (e.g. MPI_COMM_WORLD); `comm` stays the caller's.
  static std::unique_ptr<MpiCommunicator> duplicate(MPI_Comm comm, std::string name, Options options = {});
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override;
  int size() const override;
  const std::string& name() const override { return name_; }

  WorkHandle all_reduce_async(Tensor tensor, ReduceOp op = ReduceOp::sum) override;
  WorkHandle reduce_scatter_async(Tensor input, Tensor output, ReduceOp op = ReduceOp::sum) override;
  WorkHandle all_gather_async(Tensor input, Tensor output) override;
  WorkHandle broadcast_async(Tensor tensor, int root) override;
  WorkHandle send_async(Tensor tensor, int peer, int tag = 0) override;
  WorkHandle recv_async(Tensor tensor, int peer, int tag = 0) override;
  WorkHandle all_to_all_async(Tensor input, Tensor output) override;
  WorkHandle all_to_all_v_async(Tensor input, std::vector<std::int64_t> send_counts, Tensor output,
                                std::vector<std::int64_t> recv_counts) override;
  WorkHandle barrier_async() override;

  // Prints "[rank R] fatal: reason" (R = rank in MPI_COMM_WORLD) and calls MPI_Abort on
  // MPI_COMM_WORLD: every rank of the job ends.
  [[noreturn]] void abort(int exit_code, const std::string& reason) override;
  // MPI_Comm_split, run on the worker in issue order (after earlier ops); colour must be >= 0.
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override;

  CommStats stats() const override;
  void reset_stats() override;

  const Options& options() const { return options_; }
  std::shared_ptr<GroupProgress> progress() const { return progress_; }
  // A duplicate of the underlying MPI communicator, made on the worker in issue order; the caller
  // owns it (MPI_Comm_free). Collective.
  MPI_Comm duplicate_handle();
  int max_tag() const { return max_tag_; }  // largest tag send/recv accept (MPI_TAG_UB)

 private:
  struct QueuedOp;
  struct InFlight;

  WorkHandle enqueue_collective(CommOp op, bool counted, std::function<ByteCounts()> run);
  WorkHandle enqueue_point_to_point(CommOp op, Tensor tensor, int peer, int tag);
  void worker_loop();
  void execute(QueuedOp& op);
  bool progress_in_flight();  // tests in-flight send/recv, completes finished ones
  void drain_in_flight();     // waits for every in-flight send/recv
  void fail(const std::exception_ptr& error);

  std::string name_;
  Options options_;
  std::unique_ptr<MpiLink> collective_link_;  // over the collective communicator
  std::unique_ptr<MpiLink> p2p_link_;         // over the send/recv communicator
  int max_tag_ = 32767;
  std::shared_ptr<StatsBlock> stats_;
  std::shared_ptr<GroupProgress> progress_;

  // Worker-only state.
  std::unique_ptr<ScratchBuffer> scratch_;
  std::vector<std::unique_ptr<InFlight>> in_flight_;
  std::exception_ptr broken_;  // first error inside an operation

  // Queue shared with callers.
  std::mutex queue_mutex_;
  std::condition_variable queue_cv_;
  std::deque<std::unique_ptr<QueuedOp>> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace myriad::distributed
