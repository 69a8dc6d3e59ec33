// Warmup + cosine / linear / constant learning-rate schedule.
#include "myriad/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace myriad::optim {

float LrSchedule::lr_at(std::int64_t step) const {
  if (step < warmup_steps) return lr * static_cast<float>(step + 1) / static_cast<float>(warmup_steps);
  if (kind == LrScheduleKind::constant) return lr;
  // Steps warmup_steps .. total_steps - 1 decay: the first at lr, the run's last at min_lr.
  const std::int64_t decay_steps = std::max<std::int64_t>(1, total_steps - 1 - warmup_steps);
  const double progress =
      std::clamp(static_cast<double>(step - warmup_steps) / static_cast<double>(decay_steps), 0.0, 1.0);
  const double factor = kind == LrScheduleKind::cosine ? 0.5 * (1.0 + std::cos(M_PI * progress)) : 1.0 - progress;
  return static_cast<float>(min_lr + (lr - min_lr) * factor);
}

}  // namespace myriad::optim
