// DynamicLossScaler — the loss scale of fp16 training.
//
// The loss gradient is seeded with scale() (times 1/tokens) so that small activation gradients
// survive fp16; the optimizer divides the gradients by it again. After every step the caller
// reports whether the gradients were finite: an overflow (inf/NaN) means the step is skipped and
// the scale is multiplied by `backoff` (not below `min_scale`); `window` finite steps in a row
// multiply it by `growth`. The state (scale, finite steps since the last change) is part of a
// checkpoint so that a resumed run scales exactly as an uninterrupted one.
#pragma once

#include <cstdint>

namespace myriad::train {

struct LossScalerConfig {
  double initial = 65536.0;
  double growth = 2.0;
  double backoff = 0.5;
  std::int64_t window = 1000;
  double min_scale = 1.0;
};

class DynamicLossScaler {
 public:
  explicit DynamicLossScaler(const LossScalerConfig& config);

  double scale() const { return scale_; }
  std::int64_t finite_steps() const { return finite_steps_; }  // since the last change of scale
  // Records one step's outcome; returns whether its update may be applied (the gradients were finite).
  bool update(bool finite);
  void restore(double scale, std::int64_t finite_steps);

 private:
  LossScalerConfig config_;
  double scale_;
  std::int64_t finite_steps_ = 0;
};

}  // namespace myriad::train
