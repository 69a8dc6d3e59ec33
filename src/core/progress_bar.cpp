// ProgressBar: throttled redraw of "label [#####.....] 42% eta 3 s" on a terminal.
#include "myriad/core/progress_bar.h"

#include <unistd.h>

#include <algorithm>
#include <cstdio>

namespace myriad {

ProgressBar::ProgressBar(std::string label, std::int64_t total, bool enabled)
    : label_(std::move(label)),
      total_(std::max<std::int64_t>(total, 1)),
      active_(enabled && ::isatty(STDERR_FILENO) == 1),
      start_(std::chrono::steady_clock::now()),
      last_draw_(start_ - std::chrono::seconds(1)) {}

ProgressBar::~ProgressBar() { finish(); }

void ProgressBar::update(std::int64_t done) {
  if (!active_) return;
  const auto now = std::chrono::steady_clock::now();
  if (now - last_draw_ < std::chrono::milliseconds(200) && done < total_) return;
  last_draw_ = now;
  const double fraction = std::clamp(static_cast<double>(done) / static_cast<double>(total_), 0.0, 1.0);
  const double elapsed = std::chrono::duration<double>(now - start_).count();
  const double eta = fraction > 0 ? elapsed * (1.0 - fraction) / fraction : 0.0;
  constexpr int kWidth = 30;
  const int filled = static_cast<int>(fraction * kWidth);
  std::fprintf(stderr, "\r%s [%s%s] %3.0f%% eta %.0f s ", label_.c_str(), std::string(filled, '#').c_str(),
               std::string(kWidth - filled, '.').c_str(), 100.0 * fraction, eta);
  std::fflush(stderr);
}

void ProgressBar::finish() {
  if (!active_) return;
  std::fprintf(stderr, "\r%s\r", std::string(label_.size() + 60, ' ').c_str());
  std::fflush(stderr);
  active_ = false;
}

}  // namespace myriad
