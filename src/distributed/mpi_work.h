// MpiWork — the handle of one operation queued on an MpiCommunicator (internal header).
//
// Shared by the caller (wait / completed) and the worker thread (complete). Statistics live in
// a StatsBlock shared by the communicator and all its handles, so a handle may be waited on
// after its communicator is gone. A counted op adds one call when issued; on completion the
// worker adds the bytes and the issue -> completion seconds; wait() adds the seconds the caller
// was blocked. wait() may be called any number of times and from several threads; it rethrows
// the op's error every time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>

#include "myriad/distributed/communicator.h"

namespace myriad::distributed {

struct StatsBlock {
  mutable std::mutex mutex;
  CommStats stats;
};

class MpiWork final : public CommWork {
 public:
  using Clock = std::chrono::steady_clock;

  // counted = false for internal operations (split) that do not appear in the statistics.
  MpiWork(CommOp op, bool counted, std::shared_ptr<StatsBlock> stats);

  void wait() override;
  bool completed() const override;

  // Worker side: records the outcome and wakes waiters. Called exactly once.
  void complete(std::int64_t bytes_sent, std::int64_t bytes_received, std::exception_ptr error);

 private:
  CommOp op_;
  bool counted_;
  std::shared_ptr<StatsBlock> stats_;
  Clock::time_point issued_;
  mutable std::mutex mutex_;
  std::condition_variable done_cv_;
  bool done_ = false;
  std::exception_ptr error_;
};

}  // namespace myriad::distributed
