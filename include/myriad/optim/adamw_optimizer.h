// AdamWOptimizer — AdamW over every parameter of a ParameterStore, with global-norm clipping.
//
// Moments m and v are flat f32 buffers laid out like the store's flat value buffer. Weight decay
// is decoupled and skipped for the parameter kinds listed in `no_decay` (norm, bias, embedding).
// step(lr): global gradient norm over all parameters (each counted once, float64, fixed order);
// clip scale = min(1, grad_clip / norm) (grad_clip 0 = off) folded into the update's grad_scale;
// a non-finite norm skips the update and is reported. The caller zeroes gradients afterwards.
#pragma once

#include <vector>

#include "myriad/nn/parameter_store.h"

namespace myriad::optim {

struct AdamWConfig {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1e-8f;
  float weight_decay = 0.1f;
  float grad_clip = 1.0f;
  std::vector<nn::ParamKind> no_decay = {nn::ParamKind::norm, nn::ParamKind::bias};
};

struct OptimizerStepStats {
  double grad_norm = 0.0;   // before clipping
  float clip_scale = 1.0f;  // applied to the gradients in the update
  bool skipped = false;     // non-finite gradient norm: parameters untouched
};

class AdamWOptimizer {
 public:
  AdamWOptimizer(nn::ParameterStore& store, const AdamWConfig& config);

  OptimizerStepStats step(float lr);
  std::int64_t steps_taken() const { return steps_; }
  void set_steps_taken(std::int64_t steps) { steps_ = steps; }
  Tensor& m() { return m_; }
  Tensor& v() { return v_; }
  bool decays(const nn::Parameter& p) const;

 private:
  nn::ParameterStore& store_;
  AdamWConfig config_;
  Tensor m_, v_;
  std::int64_t steps_ = 0;
};

}  // namespace myriad::optim
