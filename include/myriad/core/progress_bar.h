// ProgressBar — one self-redrawing line on stderr for long phases (tokenizing, saving, loading).
//
// Drawn only when enabled (pass "this is rank 0") and stderr is a terminal, at most every 0.2 s;
// a log file or a pipe sees nothing. finish() (or the destructor) erases the line.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace myriad {

class ProgressBar {
 public:
  ProgressBar(std::string label, std::int64_t total, bool enabled);
  ~ProgressBar();
  ProgressBar(const ProgressBar&) = delete;
  ProgressBar& operator=(const ProgressBar&) = delete;

  void update(std::int64_t done);
  void finish();
  bool active() const { return active_; }

 private:
  std::string label_;
  std::int64_t total_;
  bool active_;
  std::chrono::steady_clock::time_point start_, last_draw_;
};

}  // namespace myriad
