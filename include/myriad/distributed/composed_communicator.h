// ComposedCommunicator — a group whose reductions run as an algorithm composed of collectives on
// private sub-communicators (hierarchical: an intra-node and an inter-node group; tree: a binomial
// reduction over a private copy of the group), chosen by parallel.dp_reduce.
//
// It owns the flat group it wraps (rank, size and name are the flat group's). The ops a subclass
// composes (composes(op)) are queued on a worker thread of this object and run one at a time in
// issue order; each one issues ops on the private sub-communicators only, so the bytes it moved
// are exactly the change of their byte counters while it ran. Every other op (broadcast,
// send/recv, all_to_all, barrier, split) is forwarded to the flat group at once. The two streams
// use different MPI communicators, so every rank issuing the same ops in the same order cannot
// deadlock; a composed op and a forwarded op may complete in either order.
// Statistics: composed ops are counted under their own op (calls, bytes, seconds, wait seconds);
// forwarded ops are the flat group's; levels() gives the private groups' own counters (for
// example the bytes that crossed nodes).
// Exact sums (exact_sums = true, parallel.dp_reduce_exact): every f32 sum all-reduce and
// reduce-scatter runs as a max all-reduce of block exponents and an int64 sum of the fixed-point
// values (ops/exact_sum.h) through the subclass's own algorithm, so its bits are the same for every
// algorithm and node grouping; other dtypes and max are exact already and run as usual.
// Host tensors only (the sub-communicators are MPI's); a device group is never wrapped.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "myriad/distributed/communicator.h"

namespace myriad::distributed {

struct StatsBlock;
class MpiWork;

class ComposedCommunicator : public Communicator {
 public:
  ~ComposedCommunicator() override;
  ComposedCommunicator(const ComposedCommunicator&) = delete;
  ComposedCommunicator& operator=(const ComposedCommunicator&) = delete;

  int rank() const override { return flat_->rank(); }
  int size() const override { return flat_->size(); }
  const std::string& name() const override { return flat_->name(); }

  WorkHandle all_reduce_async(Tensor tensor, ReduceOp op = ReduceOp::sum) override;
  WorkHandle reduce_scatter_async(Tensor input, Tensor output, ReduceOp op = ReduceOp::sum) override;
  WorkHandle all_gather_async(Tensor input, Tensor output) override;
  WorkHandle broadcast_async(Tensor tensor, int root) override {
    return flat_->broadcast_async(std::move(tensor), root);
  }
  WorkHandle send_async(Tensor tensor, int peer, int tag = 0) override {
    return flat_->send_async(std::move(tensor), peer, tag);
  }
  WorkHandle recv_async(Tensor tensor, int peer, int tag = 0) override {
    return flat_->recv_async(std::move(tensor), peer, tag);
  }
  void start_point_to_point() override { flat_->start_point_to_point(); }
  WorkHandle all_to_all_async(Tensor input, Tensor output) override {
    return flat_->all_to_all_async(std::move(input), std::move(output));
  }
  WorkHandle all_to_all_v_async(Tensor input, std::vector<std::int64_t> send_counts, Tensor output,
                                std::vector<std::int64_t> recv_counts) override {
    return flat_->all_to_all_v_async(std::move(input), std::move(send_counts), std::move(output),
                                     std::move(recv_counts));
  }
  WorkHandle barrier_async() override { return flat_->barrier_async(); }
  [[noreturn]] void abort(int exit_code, const std::string& reason) override;
  std::unique_ptr<Communicator> split(int color, int key, const std::string& name) override {
    return flat_->split(color, key, name);
  }

  CommStats stats() const override;
  void reset_stats() override;

  // "ring", "tree", "hierarchical (2 nodes x 2)": what the reductions run.
  virtual std::string algorithm() const = 0;
  // algorithm(), followed by ", exact sums" when exact_sums is on.
  std::string description() const;
  bool exact_sums() const { return exact_sums_; }
  // The private groups by role ("intra-node", "inter-node", "tree"), with their own statistics.
  std::vector<std::pair<std::string, CommStats>> levels() const;
  // The flat group, then the private groups (for the collective watchdog).
  std::vector<Communicator*> parts();

 protected:
  // `flat`: the group to wrap. Subclasses create their private groups by splitting it and hand
  // them over with add_level (in their constructor, collectively, in the same order on every rank).
  ComposedCommunicator(std::unique_ptr<Communicator> flat, bool exact_sums);
  Communicator& flat() { return *flat_; }
  Communicator& add_level(std::string role, std::unique_ptr<Communicator> group);
  // Starts the worker: the last line of a subclass constructor. stop() drains and joins it: the
  // first line of a subclass destructor (the worker calls the subclass's virtual functions).
  void start();
  void stop();

  // Which ops the subclass composes; the others (of all_reduce, reduce_scatter, all_gather) go
  // to the flat group like the rest — except exact f32 sums, which always run on the worker
  // (so run_reduce_scatter must work for integer sums when exact_sums is on).
  virtual bool composes(CommOp op) const = 0;
  // Run on the worker, blocking; only issue ops on the private groups.
  virtual void run_all_reduce(Tensor& tensor, ReduceOp op) = 0;
  virtual void run_reduce_scatter(const Tensor& input, Tensor& output, ReduceOp op);
  virtual void run_all_gather(const Tensor& input, Tensor& output);

 private:
  struct Job {
    std::shared_ptr<MpiWork> work;
    std::function<void()> run;
  };
  WorkHandle enqueue(CommOp op, std::function<void()> run);
  bool sums_exactly(const Tensor& tensor, ReduceOp op) const;
  void run_exact_all_reduce(Tensor& tensor);
  void run_exact_reduce_scatter(const Tensor& input, Tensor& output);
  Tensor group_exponents(const Tensor& values);      // block exponents, max-reduced over the group
  Tensor fixed_point_buffer(std::int64_t elements);  // the worker's int64 scratch, grown as needed
  void worker_loop();
  CommOpStats level_totals() const;

  std::unique_ptr<Communicator> flat_;
  bool exact_sums_ = false;
  Tensor fixed_point_;  // worker only: reused by every exact sum (the largest one's size stays)
  std::vector<std::pair<std::string, std::unique_ptr<Communicator>>> levels_;
  std::shared_ptr<StatsBlock> stats_;
  std::exception_ptr broken_;  // worker only: the first failure; later composed ops fail with it
  std::mutex mutex_;
  std::condition_variable cv_;
  std::deque<Job> queue_;
  bool stopping_ = false;
  std::thread worker_;
};

}  // namespace myriad::distributed
