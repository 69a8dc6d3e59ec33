// AsyncCheckpointWriter: one background save at a time, errors carried to the caller.
#include "myriad/train/checkpoint/async_checkpoint.h"

#include <omp.h>

#include <cstdio>

namespace myriad::train {

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  try {
    wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "asynchronous checkpoint write failed: %s\n", e.what());
  }
}

void AsyncCheckpointWriter::submit(std::string path, std::function<void()> job) {
  wait();
  path_ = std::move(path);
  thread_ = std::thread([this, job = std::move(job)]() {
    // One core for the background write (encryption's OpenMP batches included): training's own
    // threads keep the others. The setting belongs to this thread only.
    omp_set_num_threads(1);
    try {
      job();
    } catch (...) {
      error_ = std::current_exception();
    }
  });
}

std::string AsyncCheckpointWriter::wait() {
  if (thread_.joinable()) thread_.join();
  std::string path = path_;
  path_.clear();
  if (error_) {
    std::exception_ptr error = error_;
    error_ = nullptr;
    std::rethrow_exception(error);
  }
  return path;
}

}  // namespace myriad::train
