// Learning-rate schedule: linear warmup from lr/warmup to lr over `warmup_steps`, then cosine
// or linear decay to `min_lr` at `total_steps` (constant keeps lr). Steps are 0-based: the
// first optimizer step uses lr_at(0) = lr / warmup_steps when warming up.
#pragma once

#include <cstdint>
#include <string>

namespace myriad::optim {

enum class ScheduleKind { cosine, linear, constant };
ScheduleKind parse_schedule(const std::string& name);

struct LrSchedule {
  float lr = 6e-4f;
  float min_lr = 6e-5f;
  std::int64_t warmup_steps = 0;
  std::int64_t total_steps = 1000;
  ScheduleKind kind = ScheduleKind::cosine;

  float lr_at(std::int64_t step) const;
};

}  // namespace myriad::optim
