// AsyncCheckpointWriter: one background save at a time, errors carried to the caller.
#include "myriad/train/async_checkpoint.h"

#include <cstdio>

namespace myriad::train {

AsyncCheckpointWriter::~AsyncCheckpointWriter() {
  try {
    wait();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "asynchronous checkpoint write failed: %s\n", e.what());
  }
}

std::string AsyncCheckpointWriter::submit(CheckpointContents snapshot, const std::string& dir, int keep) {
  wait();
  path_ = checkpoint_path(dir, snapshot.step);
  thread_ = std::thread([this, snapshot = std::move(snapshot), dir, keep]() {
    try {
      save_checkpoint(dir, snapshot, keep);
    } catch (...) {
      error_ = std::current_exception();
    }
  });
  return path_;
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
