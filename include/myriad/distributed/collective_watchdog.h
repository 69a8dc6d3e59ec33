// CollectiveWatchdog — turns a hung collective into a report and an abort instead of a silent hang.
//
// Every MpiCommunicator numbers its collectives (#1, #2, … in issue order, the same on every rank
// of the group, since all ranks issue the same collectives in the same order) and publishes its
// progress in a GroupProgress block: how many it has issued, and which one its worker is running
// since when. The watchdog thread of each process looks at the blocks of the groups it watches;
// when a collective has been running longer than the timeout, it asks every other member of that
// group (point-to-point over its own duplicate of the world communicator, answered by their
// watchdog threads, which run even while the main thread is stuck in compute) how far they got,
// then prints one report and aborts the job:
//   [rank 0] watchdog: all_reduce #17 on group 'dp' (world ranks 0, 1) has not completed after
//   2.0 s; never arrived: rank 1 (last collective issued on 'dp': #16); not responding: none
// A rank whose watchdog does not answer within the reply deadline is listed as not responding
// (a dead or wholly frozen process). Point-to-point operations are not watched (a pipeline's
// receives wait for their sender's compute by design).
#pragma once

#include <mpi.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "myriad/distributed/communicator.h"

namespace myriad::distributed {

class MpiCommunicator;

struct GroupProgress {
  std::string name;
  std::vector<int> world_ranks;         // members, by rank in the group
  int rank = 0;                         // this process's rank in the group
  std::uint64_t key = 0;                // hash of (name, world_ranks): how peers name the same group
  std::atomic<std::int64_t> issued{0};  // collectives issued so far (= number of the last one)
  std::atomic<bool> closed{false};      // the communicator was destroyed

  // The collective the worker is executing (number 0: none).
  void start(std::int64_t number, CommOp op);
  void finish();
  struct Running {
    std::int64_t number = 0;
    CommOp op = CommOp::barrier;
    double seconds = 0.0;  // since it started
  };
  Running running() const;

 private:
  mutable std::mutex mutex_;
  std::int64_t number_ = 0;
  CommOp op_ = CommOp::barrier;
  std::chrono::steady_clock::time_point since_;
};

std::uint64_t group_key(const std::string& name, const std::vector<int>& world_ranks);

class CollectiveWatchdog {
 public:
  // Collective over `world` (it duplicates the MPI communicator for its own messages).
  CollectiveWatchdog(MpiCommunicator& world, double timeout_seconds);
  ~CollectiveWatchdog();
  CollectiveWatchdog(const CollectiveWatchdog&) = delete;
  CollectiveWatchdog& operator=(const CollectiveWatchdog&) = delete;

  void watch(std::shared_ptr<GroupProgress> group);
  double timeout_seconds() const { return timeout_; }

 private:
  void loop();
  void answer_queries();
  [[noreturn]] void report_and_abort(const GroupProgress& group, const GroupProgress::Running& running);

  MPI_Comm comm_ = MPI_COMM_NULL;
  int world_rank_ = 0;
  double timeout_;
  std::mutex mutex_;
  std::vector<std::shared_ptr<GroupProgress>> groups_;
  std::atomic<bool> stop_{false};
  std::mutex stop_mutex_;                // with stop_signal_: the destructor wakes the poll at once
  std::condition_variable stop_signal_;  // (an engine's teardown waits for no poll interval)
  std::thread thread_;
};

}  // namespace myriad::distributed
