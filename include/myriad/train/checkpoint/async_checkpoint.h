// AsyncCheckpointWriter — runs checkpoint writes in a background thread while training continues.
//
// submit() takes a job that reads only a snapshot the caller no longer touches (tensors copied out
// of the live training state) and returns at once; the job writes the checkpoint (temporary
// directory, fsync, rename, `latest`, retention), so it appears only when complete. At most one
// write is in flight: submit() first waits for the previous one. A failure in the thread is
// rethrown by the next submit() or wait(), so it is never lost; the destructor waits too (and
// reports a failure on stderr, as destructors cannot throw). The thread's OpenMP parallel regions
// (an encrypted write's sealing) run on one thread: training keeps its cores.
#pragma once

#include <exception>
#include <functional>
#include <string>
#include <thread>

namespace myriad::train {

class AsyncCheckpointWriter {
 public:
  AsyncCheckpointWriter() = default;
  ~AsyncCheckpointWriter();
  AsyncCheckpointWriter(const AsyncCheckpointWriter&) = delete;
  AsyncCheckpointWriter& operator=(const AsyncCheckpointWriter&) = delete;

  // Runs `job` in the background; `path` is where the checkpoint will be once written.
  void submit(std::string path, std::function<void()> job);
  // Waits for the write in flight (if any); returns its path ("" when none) or rethrows its error.
  std::string wait();
  bool busy() const { return thread_.joinable(); }

 private:
  std::thread thread_;
  std::string path_;
  std::exception_ptr error_;
};

}  // namespace myriad::train
