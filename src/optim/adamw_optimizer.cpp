// AdamWOptimizer: global norm, clipping, per-parameter AdamW updates with decay exclusions.
#include "myriad/optim/adamw_optimizer.h"

#include <algorithm>
#include <cmath>

#include "myriad/ops/adamw.h"
#include "myriad/ops/placement.h"

namespace myriad::optim {

std::vector<OptimizerSegment> whole_parameter_segments(nn::ParameterStore& store) {
  MYRIAD_CHECK(store.allocated(), "AdamWOptimizer: parameters must be allocated first");
  std::vector<OptimizerSegment> segments;
  for (nn::Parameter& p : store.all()) segments.push_back({p.value, p.grad, p.kind, p.primary});
  return segments;
}

AdamWOptimizer::AdamWOptimizer(nn::ParameterStore& store, const AdamWConfig& config)
    : AdamWOptimizer(whole_parameter_segments(store), config) {}

AdamWOptimizer::AdamWOptimizer(std::vector<OptimizerSegment> segments, const AdamWConfig& config)
    : segments_(std::move(segments)), config_(config) {
  std::int64_t total = 0;
  for (const OptimizerSegment& s : segments_) {
    MYRIAD_CHECK(s.value.defined() && s.grad.defined() && s.value.shape() == s.grad.shape(),
                 "AdamWOptimizer: segment value " << s.value.describe() << " and grad " << s.grad.describe()
                                                  << " must be defined with equal shapes");
    total += s.value.numel();
  }
  // The moments live where the parameters do (the host, or their backend's device).
  const ops::Placement placement =
      segments_.empty() ? ops::Placement{} : ops::placement_of(segments_.front().value, "AdamWOptimizer");
  m_ = placement.zeros({total});
  v_ = placement.zeros({total});
}

void AdamWOptimizer::set_compute_copies(DType format, std::vector<Tensor> rounded, std::vector<Tensor> narrow) {
  MYRIAD_CHECK(rounded.size() == segments_.size() && narrow.size() == segments_.size(),
               "AdamWOptimizer: " << rounded.size() << " rounded and " << narrow.size() << " 16-bit compute copies for "
                                  << segments_.size() << " segments");
  copies_.clear();
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    copies_.push_back(AdamWCopies{.format = format, .rounded = std::move(rounded[i]), .narrow = std::move(narrow[i])});
  }
}

bool AdamWOptimizer::decays(nn::ParamKind kind) const {
  return std::find(config_.no_decay.begin(), config_.no_decay.end(), kind) == config_.no_decay.end();
}

double AdamWOptimizer::grad_sum_squares() const { return sum_squares_of(false).first; }

std::pair<double, double> AdamWOptimizer::grad_sum_squares_by_kind() const { return sum_squares_of(true); }

std::pair<double, double> AdamWOptimizer::sum_squares_of(bool split_experts) const {
  std::vector<Tensor> grads;
  std::vector<bool> expert;
  for (const OptimizerSegment& s : segments_) {
    if (!s.counted) continue;
    grads.push_back(s.grad);
    expert.push_back(split_experts && s.expert);
  }
  std::pair<double, double> sums{0.0, 0.0};
  const std::vector<double> parts = grad_norms_squared(grads);  // one read of every norm
  for (std::size_t i = 0; i < parts.size(); ++i) (expert[i] ? sums.second : sums.first) += parts[i];  // segment order
  return sums;
}

OptimizerStepStats clipping(const AdamWConfig& config, double global_sum_squares, float unscale) {
  OptimizerStepStats stats;
  stats.grad_norm = std::sqrt(global_sum_squares) * static_cast<double>(unscale);
  stats.skipped = !std::isfinite(stats.grad_norm);
  if (!stats.skipped && config.grad_clip > 0.0f && stats.grad_norm > config.grad_clip) {
    stats.clip_scale = static_cast<float>(config.grad_clip / stats.grad_norm);
  }
  return stats;
}

OptimizerStepStats AdamWOptimizer::step(float lr, double global_sum_squares, float unscale) {
  OptimizerStepStats stats = clipping(config_, global_sum_squares, unscale);
  if (stats.skipped) return stats;
  ++steps_;
  std::int64_t offset = 0;
  for (OptimizerSegment& s : segments_) {
    AdamWArgs args{.lr = lr,
                   .beta1 = config_.beta1,
                   .beta2 = config_.beta2,
                   .eps = config_.eps,
                   .weight_decay = decays(s.kind) ? config_.weight_decay : 0.0f,
                   .step = steps_,
                   .grad_scale = stats.clip_scale * unscale};
    const Shape& shape = s.value.shape();
    Tensor m = Tensor::from_storage(m_.storage(), shape, contiguous_strides(shape), offset, DType::f32);
    Tensor v = Tensor::from_storage(v_.storage(), shape, contiguous_strides(shape), offset, DType::f32);
    adamw_update(args, s.value, s.grad, m, v, copies_.empty() ? AdamWCopies{} : copies_[&s - segments_.data()]);
    offset += s.value.numel();
  }
  stats.compute_copies_written = writes_compute_copies();
  return stats;
}

}  // namespace myriad::optim
