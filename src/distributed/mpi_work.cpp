// MpiWork: completion flag, condition variable and statistics of one queued op (see mpi_work.h).
#include "mpi_work.h"

namespace myriad::distributed {

MpiWork::MpiWork(CommOp op, bool counted, std::shared_ptr<StatsBlock> stats)
    : op_(op), counted_(counted), stats_(std::move(stats)), issued_(Clock::now()) {
  if (!counted_) return;
  std::lock_guard<std::mutex> lock(stats_->mutex);
  stats_->stats[op_].calls += 1;
}

void MpiWork::wait() {
  const Clock::time_point start = Clock::now();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    done_cv_.wait(lock, [&] { return done_; });
    error = error_;
  }
  if (counted_) {
    const double blocked = std::chrono::duration<double>(Clock::now() - start).count();
    std::lock_guard<std::mutex> lock(stats_->mutex);
    stats_->stats[op_].wait_seconds += blocked;
  }
  if (error) std::rethrow_exception(error);
}

bool MpiWork::completed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return done_;
}

void MpiWork::complete(std::int64_t bytes_sent, std::int64_t bytes_received, std::exception_ptr error) {
  if (counted_) {
    const double seconds = std::chrono::duration<double>(Clock::now() - issued_).count();
    std::lock_guard<std::mutex> lock(stats_->mutex);
    CommOpStats& stats = stats_->stats[op_];
    stats.bytes_sent += bytes_sent;
    stats.bytes_received += bytes_received;
    stats.seconds += seconds;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    done_ = true;
    error_ = std::move(error);
  }
  done_cv_.notify_all();
}

}  // namespace myriad::distributed
