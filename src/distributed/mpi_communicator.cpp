// MpiCommunicator: argument checks, the op queue and its worker thread (see mpi_communicator.h).
// The algorithms themselves are in ring_collectives.cpp and exchange_collectives.cpp.
#include "myriad/distributed/mpi_communicator.h"

#include <cstdio>
#include <cstdlib>

#include "mpi_collectives.h"
#include "mpi_link.h"
#include "mpi_work.h"
#include "myriad/core/error.h"
#include "myriad/distributed/comm_checks.h"

namespace myriad::distributed {

// A queued op: a collective body run to completion, or one send/recv to post.
struct MpiCommunicator::QueuedOp {
  std::shared_ptr<MpiWork> work;
  CommOp op = CommOp::barrier;
  std::int64_t number = 0;                 // collectives: #n in this group's issue order
  std::function<ByteCounts()> collective;  // empty for send/recv
  bool is_send = false;
  Tensor tensor;  // send/recv buffer
  int peer = 0;
  int tag = 0;
};

// A posted send/recv.
struct MpiCommunicator::InFlight {
  std::shared_ptr<MpiWork> work;
  RequestSet requests;
  Tensor tensor;  // keeps the buffer alive until completion
  bool is_send;
};

namespace {

// Polling while send/recv are in flight and no op is queued: a short spell of yields (low latency
// for small messages), then naps that leave the core to other ranks.
constexpr int kYieldPolls = 64;
constexpr auto kPollNap = std::chrono::microseconds(50);

}  // namespace

MpiCommunicator::MpiCommunicator(MPI_Comm comm, std::string name, Options options)
    : name_(std::move(name)),
      options_(options),
      collective_link_(std::make_unique<MpiLink>()),
      p2p_link_(std::make_unique<MpiLink>()),
      stats_(std::make_shared<StatsBlock>()),
      scratch_(std::make_unique<ScratchBuffer>()) {
  MYRIAD_CHECK(comm != MPI_COMM_NULL, "MpiCommunicator '" << name_ << "': null MPI communicator");
  MYRIAD_CHECK(
      options_.max_message_bytes >= 1 && options_.max_message_bytes <= (std::int64_t{1} << 30),
      "MpiCommunicator '" << name_ << "': max_message_bytes " << options_.max_message_bytes << " outside [1, 2^30]");
  MpiLink& link = *collective_link_;
  link.comm = comm;
  link.group = name_;
  link.max_message_bytes = options_.max_message_bytes;
  check_mpi(MPI_Comm_set_errhandler(comm, MPI_ERRORS_RETURN), link, "create", "MPI_Comm_set_errhandler");
  check_mpi(MPI_Comm_rank(comm, &link.rank), link, "create", "MPI_Comm_rank");
  check_mpi(MPI_Comm_size(comm, &link.size), link, "create", "MPI_Comm_size");
  *p2p_link_ = link;
  check_mpi(MPI_Comm_dup(comm, &p2p_link_->comm), link, "create", "MPI_Comm_dup");
  check_mpi(MPI_Comm_set_errhandler(p2p_link_->comm, MPI_ERRORS_RETURN), link, "create", "MPI_Comm_set_errhandler");
  void* tag_ub = nullptr;
  int found = 0;
  check_mpi(MPI_Comm_get_attr(comm, MPI_TAG_UB, &tag_ub, &found), link, "create", "MPI_Comm_get_attr(MPI_TAG_UB)");
  if (found && tag_ub) max_tag_ = *static_cast<int*>(tag_ub);
  progress_ = std::make_shared<GroupProgress>();
  progress_->name = name_;
  progress_->rank = link.rank;
  MPI_Group group = MPI_GROUP_NULL, world_group = MPI_GROUP_NULL;
  check_mpi(MPI_Comm_group(comm, &group), link, "create", "MPI_Comm_group");
  check_mpi(MPI_Comm_group(MPI_COMM_WORLD, &world_group), link, "create", "MPI_Comm_group(world)");
  std::vector<int> local(static_cast<std::size_t>(link.size));
  for (int r = 0; r < link.size; ++r) local[static_cast<std::size_t>(r)] = r;
  progress_->world_ranks.resize(local.size());
  check_mpi(MPI_Group_translate_ranks(group, link.size, local.data(), world_group, progress_->world_ranks.data()), link,
            "create", "MPI_Group_translate_ranks");
  MPI_Group_free(&group);
  MPI_Group_free(&world_group);
  progress_->key = group_key(name_, progress_->world_ranks);
  worker_ = std::thread([this] { worker_loop(); });
}

std::unique_ptr<MpiCommunicator> MpiCommunicator::duplicate(MPI_Comm comm, std::string name, Options options) {
  MPI_Comm copy = MPI_COMM_NULL;
  const int rc = MPI_Comm_dup(comm, &copy);
  MYRIAD_CHECK(rc == MPI_SUCCESS, "MpiCommunicator '" << name << "': MPI_Comm_dup failed: " << mpi_error_string(rc));
  return std::make_unique<MpiCommunicator>(copy, std::move(name), options);
}

MpiCommunicator::~MpiCommunicator() {
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    stopping_ = true;
  }
  queue_cv_.notify_all();
  worker_.join();
  progress_->closed = true;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;  // too late to free (the header asks to destroy before MPI_Finalize)
  MPI_Comm_free(&p2p_link_->comm);
  MPI_Comm_free(&collective_link_->comm);
}

int MpiCommunicator::rank() const { return collective_link_->rank; }
int MpiCommunicator::size() const { return collective_link_->size; }

// --- issuing ----------------------------------------------------------------------------------

WorkHandle MpiCommunicator::enqueue_collective(CommOp op, bool counted, std::function<ByteCounts()> run) {
  auto queued = std::make_unique<QueuedOp>();
  queued->work = std::make_shared<MpiWork>(op, counted, stats_);
  queued->op = op;
  queued->collective = std::move(run);
  WorkHandle handle = queued->work;
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    queued->number = ++progress_->issued;  // under the queue lock: numbers follow queue order
    queue_.push_back(std::move(queued));
  }
  queue_cv_.notify_one();
  return handle;
}

WorkHandle MpiCommunicator::enqueue_point_to_point(CommOp op, Tensor tensor, int peer, int tag) {
  auto queued = std::make_unique<QueuedOp>();
  queued->work = std::make_shared<MpiWork>(op, true, stats_);
  queued->is_send = op == CommOp::send;
  queued->tensor = std::move(tensor);
  queued->peer = peer;
  queued->tag = tag;
  WorkHandle handle = queued->work;
  {
    std::lock_guard<std::mutex> lock(queue_mutex_);
    queue_.push_back(std::move(queued));
  }
  queue_cv_.notify_one();
  return handle;
}

WorkHandle MpiCommunicator::all_reduce_async(Tensor tensor, ReduceOp op) {
  check_all_reduce_args(*this, tensor);
  return enqueue_collective(CommOp::all_reduce, true, [this, tensor, op] {
    return ring_all_reduce(*collective_link_, tensor.raw_data(), tensor.numel(), tensor.dtype(), op, *scratch_);
  });
}

WorkHandle MpiCommunicator::reduce_scatter_async(Tensor input, Tensor output, ReduceOp op) {
  check_reduce_scatter_args(*this, input, output);
  return enqueue_collective(CommOp::reduce_scatter, true, [this, input, output, op] {
    return ring_reduce_scatter(*collective_link_, input.raw_data(), input.numel(), output.raw_data(), input.dtype(), op,
                               *scratch_);
  });
}

WorkHandle MpiCommunicator::all_gather_async(Tensor input, Tensor output) {
  check_all_gather_args(*this, input, output);
  return enqueue_collective(CommOp::all_gather, true, [this, input, output] {
    return ring_all_gather(*collective_link_, input.raw_data(), output.raw_data(), output.numel(),
                           dtype_size(output.dtype()));
  });
}

WorkHandle MpiCommunicator::broadcast_async(Tensor tensor, int root) {
  check_broadcast_args(*this, tensor, root);
  return enqueue_collective(CommOp::broadcast, true, [this, tensor, root] {
    return tree_broadcast(*collective_link_, tensor.raw_data(), static_cast<std::int64_t>(tensor.nbytes()), root);
  });
}

WorkHandle MpiCommunicator::send_async(Tensor tensor, int peer, int tag) {
  check_point_to_point_args("send", *this, tensor, peer, tag, max_tag_);
  return enqueue_point_to_point(CommOp::send, std::move(tensor), peer, tag);
}

WorkHandle MpiCommunicator::recv_async(Tensor tensor, int peer, int tag) {
  check_point_to_point_args("recv", *this, tensor, peer, tag, max_tag_);
  return enqueue_point_to_point(CommOp::recv, std::move(tensor), peer, tag);
}

WorkHandle MpiCommunicator::all_to_all_async(Tensor input, Tensor output) {
  check_all_to_all_args(*this, input, output);
  std::vector<std::int64_t> counts(static_cast<std::size_t>(size()), input.numel() / size());
  return enqueue_collective(CommOp::all_to_all, true, [this, input, output, counts] {
    return pairwise_all_to_all_v(*collective_link_, input.raw_data(), counts, output.raw_data(), counts,
                                 dtype_size(input.dtype()));
  });
}

WorkHandle MpiCommunicator::all_to_all_v_async(Tensor input, std::vector<std::int64_t> send_counts, Tensor output,
                                               std::vector<std::int64_t> recv_counts) {
  check_all_to_all_v_args(*this, input, send_counts, output, recv_counts);
  return enqueue_collective(CommOp::all_to_all, true,
                            [this, input, output, send = std::move(send_counts), recv = std::move(recv_counts)] {
                              return pairwise_all_to_all_v(*collective_link_, input.raw_data(), send, output.raw_data(),
                                                           recv, dtype_size(input.dtype()));
                            });
}

WorkHandle MpiCommunicator::barrier_async() {
  return enqueue_collective(CommOp::barrier, true, [this] {
    check_mpi(MPI_Barrier(collective_link_->comm), *collective_link_, "barrier", "MPI_Barrier");
    return ByteCounts{};
  });
}

void MpiCommunicator::abort(int exit_code, const std::string& reason) {
  int world_rank = -1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  std::fprintf(stderr, "[rank %d] fatal: %s\n", world_rank, reason.c_str());
  std::fflush(stderr);
  std::fflush(stdout);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; this keeps [[noreturn]] honest
}

std::unique_ptr<Communicator> MpiCommunicator::split(int color, int key, const std::string& name) {
  MYRIAD_CHECK(color >= 0, comm_context("split", *this)
                               << " into '" << name << "': colour " << color << " must be >= 0");
  auto result = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
  enqueue_collective(CommOp::barrier, false, [this, color, key, result] {
    check_mpi(MPI_Comm_split(collective_link_->comm, color, key, result.get()), *collective_link_, "split",
              "MPI_Comm_split");
    return ByteCounts{};
  })->wait();
  return std::make_unique<MpiCommunicator>(*result, name, options_);
}

MPI_Comm MpiCommunicator::duplicate_handle() {
  auto result = std::make_shared<MPI_Comm>(MPI_COMM_NULL);
  enqueue_collective(CommOp::barrier, false, [this, result] {
    check_mpi(MPI_Comm_dup(collective_link_->comm, result.get()), *collective_link_, "duplicate", "MPI_Comm_dup");
    return ByteCounts{};
  })->wait();
  return *result;
}

CommStats MpiCommunicator::stats() const {
  std::lock_guard<std::mutex> lock(stats_->mutex);
  return stats_->stats;
}

void MpiCommunicator::reset_stats() {
  std::lock_guard<std::mutex> lock(stats_->mutex);
  stats_->stats = CommStats{};
}

// --- worker -----------------------------------------------------------------------------------

void MpiCommunicator::worker_loop() {
  std::unique_lock<std::mutex> lock(queue_mutex_);
  int idle_polls = 0;
  for (;;) {
    if (!queue_.empty()) {
      std::unique_ptr<QueuedOp> op = std::move(queue_.front());
      queue_.pop_front();
      lock.unlock();
      execute(*op);
      lock.lock();
      idle_polls = 0;
      continue;
    }
    if (!in_flight_.empty()) {
      lock.unlock();
      const bool progressed = progress_in_flight();
      lock.lock();
      if (progressed) {
        idle_polls = 0;
      } else if (queue_.empty() && ++idle_polls > kYieldPolls) {
        queue_cv_.wait_for(lock, kPollNap);
      } else if (queue_.empty()) {
        lock.unlock();
        std::this_thread::yield();
        lock.lock();
      }
      continue;
    }
    if (stopping_) return;
    queue_cv_.wait(lock, [&] { return stopping_ || !queue_.empty(); });
  }
}

void MpiCommunicator::fail(const std::exception_ptr& error) {
  if (!broken_) broken_ = error;
}

void MpiCommunicator::execute(QueuedOp& op) {
  if (op.collective) {
    progress_->start(op.number, op.op);  // waiting for earlier send/recv counts as running
    drain_in_flight();
  }
  struct Finish {
    GroupProgress* progress;
    bool active;
    ~Finish() {
      if (active) progress->finish();
    }
  } finish{progress_.get(), static_cast<bool>(op.collective)};
  if (broken_) {
    try {
      std::rethrow_exception(broken_);
    } catch (const Error& e) {
      op.work->complete(
          0, 0,
          std::make_exception_ptr(
              Error("group '" + name_ + "' is unusable after an earlier error: " + e.message(), __FILE__, __LINE__)));
    } catch (...) {
      op.work->complete(0, 0, broken_);
    }
    return;
  }
  if (op.collective) {
    try {
      const ByteCounts counts = op.collective();
      op.work->complete(counts.sent, counts.received, nullptr);
    } catch (...) {
      fail(std::current_exception());
      op.work->complete(0, 0, std::current_exception());
    }
    return;
  }
  auto posted = std::make_unique<InFlight>(
      InFlight{op.work, RequestSet(*p2p_link_, op.is_send ? "send" : "recv"), std::move(op.tensor), op.is_send});
  try {
    const auto bytes = static_cast<std::int64_t>(posted->tensor.nbytes());
    if (posted->is_send) {
      posted->requests.send(posted->tensor.raw_data(), bytes, op.peer, op.tag);
    } else {
      posted->requests.recv(posted->tensor.raw_data(), bytes, op.peer, op.tag);
    }
  } catch (...) {
    fail(std::current_exception());
    posted->work->complete(0, 0, std::current_exception());
    return;
  }
  in_flight_.push_back(std::move(posted));
}

bool MpiCommunicator::progress_in_flight() {
  bool progressed = false;
  for (std::size_t i = 0; i < in_flight_.size();) {
    InFlight& op = *in_flight_[i];
    std::exception_ptr error;
    bool done = false;
    try {
      done = op.requests.test_all();
    } catch (...) {
      error = std::current_exception();
      fail(error);
      done = true;
    }
    if (!done) {
      ++i;
      continue;
    }
    const auto bytes = error ? 0 : static_cast<std::int64_t>(op.tensor.nbytes());
    op.work->complete(op.is_send ? bytes : 0, op.is_send ? 0 : bytes, error);
    in_flight_.erase(in_flight_.begin() + static_cast<std::ptrdiff_t>(i));
    progressed = true;
  }
  return progressed;
}

void MpiCommunicator::drain_in_flight() {
  for (std::unique_ptr<InFlight>& op : in_flight_) {
    std::exception_ptr error;
    try {
      op->requests.wait_all();
    } catch (...) {
      error = std::current_exception();
      fail(error);
    }
    const auto bytes = error ? 0 : static_cast<std::int64_t>(op->tensor.nbytes());
    op->work->complete(op->is_send ? bytes : 0, op->is_send ? 0 : bytes, error);
  }
  in_flight_.clear();
}

}  // namespace myriad::distributed
