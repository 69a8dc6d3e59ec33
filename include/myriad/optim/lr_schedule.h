// Learning-rate schedule: linear warmup over `warmup_steps`, then cosine or linear decay to
// `min_lr` (constant keeps lr). Steps are 0-based. Warmup step s trains at lr * (s + 1) /
// warmup_steps: the first optimizer step already moves (at lr / warmup_steps; a step at lr 0
// would be wasted) and step warmup_steps - 1 reaches lr. The decay runs over steps
// warmup_steps .. total_steps - 1: the first of them at lr, the last step of the run
// (total_steps - 1) exactly at min_lr, and any step after it stays at min_lr.
#pragma once

#include <cstdint>

#include "myriad/core/step_modes.h"

namespace myriad::optim {

struct LrSchedule {
  float lr = 6e-4f;
  float min_lr = 6e-5f;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1000;
  LrScheduleKind kind = LrScheduleKind::cosine;  // training.schedule

  float lr_at(std::int64_t step) const;
};

}  // namespace myriad::optim
