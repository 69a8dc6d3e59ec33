// CollectiveWatchdog: progress blocks, the polling thread, the peer queries and the report.
#include "myriad/distributed/collective_watchdog.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "myriad/core/error.h"
#include "myriad/distributed/mpi_communicator.h"

namespace myriad::distributed {

namespace {

constexpr int kQueryTag = 1;
constexpr int kReplyTag = 2;

double seconds_between(std::chrono::steady_clock::time_point a, std::chrono::steady_clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

}  // namespace

void GroupProgress::start(std::int64_t number, CommOp op) {
  std::lock_guard<std::mutex> lock(mutex_);
  number_ = number;
  op_ = op;
  since_ = std::chrono::steady_clock::now();
}

void GroupProgress::finish() {
  std::lock_guard<std::mutex> lock(mutex_);
  number_ = 0;
}

GroupProgress::Running GroupProgress::running() const {
  std::lock_guard<std::mutex> lock(mutex_);
  Running r;
  r.number = number_;
  r.op = op_;
  if (number_ != 0) r.seconds = seconds_between(since_, std::chrono::steady_clock::now());
  return r;
}

std::uint64_t group_key(const std::string& name, const std::vector<int>& world_ranks) {
  std::uint64_t hash = 1469598103934665603ull;
  auto mix = [&](std::uint64_t value) {
    hash ^= value;
    hash *= 1099511628211ull;
  };
  for (unsigned char c : name) mix(c);
  for (int r : world_ranks) mix(static_cast<std::uint64_t>(r) + 0x9e3779b97f4a7c15ull);
  return hash;
}

CollectiveWatchdog::CollectiveWatchdog(MpiCommunicator& world, double timeout_seconds)
    : comm_(world.duplicate_handle()), timeout_(timeout_seconds) {
  MYRIAD_CHECK(timeout_seconds > 0, "collective watchdog: timeout must be > 0 seconds, got " << timeout_seconds);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  thread_ = std::thread([this] { loop(); });
}

CollectiveWatchdog::~CollectiveWatchdog() {
  {
    std::lock_guard<std::mutex> lock(stop_mutex_);
    stop_ = true;
  }
  stop_signal_.notify_all();
  thread_.join();
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Comm_free(&comm_);
}

void CollectiveWatchdog::watch(std::shared_ptr<GroupProgress> group) {
  std::lock_guard<std::mutex> lock(mutex_);
  groups_.push_back(std::move(group));
}

void CollectiveWatchdog::answer_queries() {
  for (;;) {
    int pending = 0;
    MPI_Status status;
    MPI_Iprobe(MPI_ANY_SOURCE, kQueryTag, comm_, &pending, &status);
    if (!pending) return;
    std::uint64_t key = 0;
    MPI_Recv(&key, 1, MPI_UINT64_T, status.MPI_SOURCE, kQueryTag, comm_, MPI_STATUS_IGNORE);
    std::int64_t reply[3] = {0, 0, 0};  // found, collectives issued, collective running
    {
      std::lock_guard<std::mutex> lock(mutex_);
      for (const std::shared_ptr<GroupProgress>& g : groups_) {
        if (g->key != key || g->closed) continue;
        reply[0] = 1;
        reply[1] = g->issued;
        reply[2] = g->running().number;
      }
    }
    MPI_Send(reply, 3, MPI_INT64_T, status.MPI_SOURCE, kReplyTag, comm_);
  }
}

void CollectiveWatchdog::loop() {
  const auto poll = std::chrono::duration<double>(std::clamp(timeout_ / 20.0, 0.01, 0.5));
  while (!stop_) {
    answer_queries();
    std::shared_ptr<GroupProgress> stuck;
    GroupProgress::Running running;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      groups_.erase(std::remove_if(groups_.begin(), groups_.end(), [](const auto& g) { return g->closed.load(); }),
                    groups_.end());
      for (const std::shared_ptr<GroupProgress>& g : groups_) {
        const GroupProgress::Running r = g->running();
        if (r.number != 0 && r.seconds > timeout_) {
          stuck = g;
          running = r;
          break;
        }
      }
    }
    if (stuck) report_and_abort(*stuck, running);
    std::unique_lock<std::mutex> lock(stop_mutex_);
    stop_signal_.wait_for(lock, poll, [this] { return stop_.load(); });
  }
}

void CollectiveWatchdog::report_and_abort(const GroupProgress& group, const GroupProgress::Running& running) {
  // Ask every other member how far it got; keep answering their questions meanwhile (they may be
  // diagnosing the same collective).
  std::vector<int> peers;
  for (int r : group.world_ranks) {
    if (r != world_rank_) peers.push_back(r);
  }
  std::vector<std::array<std::int64_t, 3>> replies(peers.size(), {-1, -1, -1});
  std::vector<MPI_Request> receives(peers.size()), sends(peers.size());
  std::uint64_t key = group.key;
  for (std::size_t i = 0; i < peers.size(); ++i) {
    MPI_Irecv(replies[i].data(), 3, MPI_INT64_T, peers[i], kReplyTag, comm_, &receives[i]);
    MPI_Isend(&key, 1, MPI_UINT64_T, peers[i], kQueryTag, comm_, &sends[i]);
  }
  const double deadline = std::clamp(timeout_, 2.0, 30.0);
  const auto start = std::chrono::steady_clock::now();
  std::vector<bool> answered(peers.size(), false);
  while (seconds_between(start, std::chrono::steady_clock::now()) < deadline) {
    answer_queries();
    bool all = true;
    for (std::size_t i = 0; i < peers.size(); ++i) {
      if (answered[i]) continue;
      int done = 0;
      MPI_Test(&receives[i], &done, MPI_STATUS_IGNORE);
      answered[i] = done != 0;
      all = all && answered[i];
    }
    if (all) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  std::ostringstream ranks, never, silent;
  for (std::size_t i = 0; i < group.world_ranks.size(); ++i) ranks << (i ? ", " : "") << group.world_ranks[i];
  for (std::size_t i = 0; i < peers.size(); ++i) {
    if (!answered[i] || replies[i][0] != 1) {
      silent << (silent.tellp() > 0 ? ", " : "") << "rank " << peers[i];
    } else if (replies[i][1] < running.number) {
      never << (never.tellp() > 0 ? ", " : "") << "rank " << peers[i] << " (last collective issued on '" << group.name
            << "': #" << replies[i][1] << ")";
    }
  }
  std::fprintf(stderr,
               "[rank %d] watchdog: %s #%lld on group '%s' (world ranks %s) has not completed after %.1f s "
               "(parallel.collective_timeout %.1f s); never arrived: %s; not responding: %s. Aborting the job.\n",
               world_rank_, comm_op_name(running.op), static_cast<long long>(running.number), group.name.c_str(),
               ranks.str().c_str(), running.seconds + seconds_between(start, std::chrono::steady_clock::now()),
               timeout_, never.tellp() > 0 ? never.str().c_str() : "none (every member is inside it)",
               silent.tellp() > 0 ? silent.str().c_str() : "none");
  std::fflush(stderr);
  std::fflush(stdout);
  MPI_Abort(MPI_COMM_WORLD, 3);
  std::_Exit(3);
}

}  // namespace myriad::distributed
