// DynamicLossScaler: backoff on overflow, growth after a window of finite steps.
#include "myriad/train/loss_scaler.h"

#include <algorithm>

#include "myriad/core/error.h"

namespace myriad::train {

DynamicLossScaler::DynamicLossScaler(const LossScalerConfig& config) : config_(config), scale_(config.initial) {
  MYRIAD_CHECK(config.initial >= config.min_scale && config.min_scale > 0 && config.growth >= 1 && config.backoff > 0 &&
                   config.backoff < 1 && config.window >= 1,
               "loss scaler: need initial (" << config.initial << ") >= min_scale (" << config.min_scale
                                             << ") > 0, growth (" << config.growth << ") >= 1, 0 < backoff ("
                                             << config.backoff << ") < 1 and window (" << config.window << ") >= 1");
}

bool DynamicLossScaler::update(bool finite) {
  if (!finite) {
    scale_ = std::max(config_.min_scale, scale_ * config_.backoff);
    finite_steps_ = 0;
    return false;
  }
  if (++finite_steps_ >= config_.window) {
    scale_ *= config_.growth;
    finite_steps_ = 0;
  }
  return true;
}

void DynamicLossScaler::restore(double scale, std::int64_t finite_steps) {
  MYRIAD_CHECK(scale >= config_.min_scale && finite_steps >= 0, "loss scaler: cannot restore scale "
                                                                    << scale << " (min " << config_.min_scale
                                                                    << ") with " << finite_steps << " finite steps");
  scale_ = scale;
  finite_steps_ = finite_steps;
}

}  // namespace myriad::train
