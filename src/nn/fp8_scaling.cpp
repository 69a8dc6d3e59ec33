// Fp8Scaling: the delayed-scaling recipe's bookkeeping (nn/fp8_scaling.h).
#include "myriad/nn/fp8_scaling.h"

#include <algorithm>
#include <cmath>

#include "myriad/core/error.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/fp8.h"

namespace myriad::nn {

float fp8_scale_for(float amax, const Fp8Format& format, int margin) {
  MYRIAD_CHECK(std::isfinite(amax) && amax > 0.0f, "fp8_scale_for: amax must be finite and > 0, got " << amax);
  const double exponent = std::floor(std::log2(static_cast<double>(format.max_finite) / amax)) - margin;
  return std::ldexp(1.0f, static_cast<int>(std::clamp(exponent, -120.0, 120.0)));
}

Fp8Scaling::Fp8Scaling(const Fp8Recipe& recipe, std::int64_t linears, const ops::Placement& placement)
    : recipe_(recipe), linears_(linears), placement_(placement) {
  MYRIAD_CHECK(recipe.amax_history >= 1, "training.fp8_amax_history must be >= 1, got " << recipe.amax_history);
  MYRIAD_CHECK(recipe.margin >= 0 && recipe.margin <= 16,
               "training.fp8_margin must be in [0, 16] (powers of two of headroom), got " << recipe.margin);
  MYRIAD_CHECK(linears >= 0, "Fp8Scaling: " << linears << " linear layers");
  const auto slots = static_cast<std::size_t>(linears * kFp8Roles);
  amax_ = placement_.zeros({static_cast<std::int64_t>(slots)});
  device_scales_ = placement_.empty({2, static_cast<std::int64_t>(slots)});
  scales_.assign(slots, 1.0f);
  history_.assign(slots * static_cast<std::size_t>(recipe.amax_history), 0.0f);
  known_.assign(slots, 0);
  just_in_time_.assign(slots, 0);
  upload_scales();
}

void Fp8Scaling::upload_scales() {
  const auto slots = static_cast<std::int64_t>(scales_.size());
  Tensor host = Tensor::empty({2, slots});
  float* h = host.data<float>();
  for (std::int64_t s = 0; s < slots; ++s) {
    h[s] = scales_[static_cast<std::size_t>(s)];
    h[slots + s] = 1.0f / scales_[static_cast<std::size_t>(s)];  // exact: a power of two
  }
  copy(placement_.from_host(host), device_scales_);
}

Tensor Fp8Scaling::scale_slot(std::int64_t linear, Fp8Role role) const {
  const auto s = static_cast<std::int64_t>(slot(linear, role));
  return device_scales_.select(0, 0).slice(0, s, s + 1);
}

Tensor Fp8Scaling::dequant_slot(std::int64_t linear, Fp8Role role) const {
  const auto s = static_cast<std::int64_t>(slot(linear, role));
  return device_scales_.select(0, 1).slice(0, s, s + 1);
}

std::size_t Fp8Scaling::slot(std::int64_t linear, Fp8Role role) const {
  MYRIAD_CHECK(linear >= 0 && linear < linears_, "Fp8Scaling: linear " << linear << " of " << linears_);
  return static_cast<std::size_t>(linear * kFp8Roles + static_cast<int>(role));
}

Tensor Fp8Scaling::amax_slot(std::int64_t linear, Fp8Role role) const {
  const auto s = static_cast<std::int64_t>(slot(linear, role));
  return amax_.slice(0, s, s + 1);
}

float Fp8Scaling::scale(std::int64_t linear, Fp8Role role, const Tensor& t) {
  const std::size_t s = slot(linear, role);
  if (known_[s] != 0) return scales_[s];
  // Just in time: the tensor's own amax (quantised once into a scratch copy to measure it).
  Tensor measured = placement_.zeros({1}), none;
  Tensor scratch = placement_.empty(t.shape(), format_of(role));
  fp8_quantize(t, placement_.from_host(Tensor::full({1}, 1.0)), scratch, none, measured);
  const float amax = *placement_.to_host(measured).data<float>();
  if (std::isfinite(amax) && amax > 0.0f) scales_[s] = fp8_scale_for(amax, fp8_format(format_of(role)), recipe_.margin);
  known_[s] = 1;
  just_in_time_[s] = 1;
  upload_scales();
  return scales_[s];
}

std::vector<Fp8Saturation> Fp8Scaling::end_step(const std::function<void(Tensor&)>& reduce_max) {
  Tensor host = placement_.to_host(amax_);
  if (host.storage() == amax_.storage()) host = host.clone();  // on the host: not the live buffer
  reduce_max(host);
  const float* amax = host.data<float>();
  const auto H = static_cast<std::size_t>(recipe_.amax_history);
  std::vector<Fp8Saturation> saturated;
  for (std::size_t s = 0; s < scales_.size(); ++s) {
    const auto role = static_cast<Fp8Role>(s % kFp8Roles);
    const float range = fp8_format(format_of(role)).max_finite / scales_[s];
    // A just-in-time scale is each rank's own (its first tensor's): the world's amax says nothing
    // about what this rank clipped, so only delayed scales are judged.
    if (known_[s] != 0 && just_in_time_[s] == 0 && std::isfinite(amax[s]) && amax[s] > range) {
      saturated.push_back({static_cast<std::int64_t>(s) / kFp8Roles, role, amax[s], range});
    }
    float* history = history_.data() + s * H;
    if (std::isfinite(amax[s]) && amax[s] > 0.0f) {
      std::rotate(history, history + 1, history + H);
      history[H - 1] = amax[s];
    }
    const float largest = *std::max_element(history, history + H);
    if (largest > 0.0f) {
      scales_[s] = fp8_scale_for(largest, fp8_format(format_of(role)), recipe_.margin);
      known_[s] = 1;
    }
  }
  zero(amax_);
  upload_scales();
  std::fill(just_in_time_.begin(), just_in_time_.end(), 0);
  std::sort(saturated.begin(), saturated.end(),
            [](const Fp8Saturation& a, const Fp8Saturation& b) { return a.amax / a.range > b.amax / b.range; });
  return saturated;
}

Tensor Fp8Scaling::state() const {
  const auto slots = static_cast<std::int64_t>(scales_.size());
  Tensor out = Tensor::empty({slots * (1 + recipe_.amax_history)});
  float* o = out.data<float>();
  std::copy(scales_.begin(), scales_.end(), o);
  std::copy(history_.begin(), history_.end(), o + slots);
  return out;
}

void Fp8Scaling::load_state(const Tensor& state) {
  const auto slots = static_cast<std::int64_t>(scales_.size());
  MYRIAD_CHECK(state.dtype() == DType::f32 && state.numel() == slots * (1 + recipe_.amax_history),
               "fp8 scaling state: " << state.describe() << " does not hold " << slots << " scales and histories of "
                                     << recipe_.amax_history << " steps (training.fp8_amax_history changed?)");
  const Tensor c = state.contiguous();
  const float* in = c.data<float>();
  std::copy(in, in + slots, scales_.begin());
  std::copy(in + slots, in + c.numel(), history_.begin());
  const auto H = static_cast<std::size_t>(recipe_.amax_history);
  for (std::size_t s = 0; s < scales_.size(); ++s) {
    known_[s] = *std::max_element(history_.begin() + static_cast<std::ptrdiff_t>(s * H),
                                  history_.begin() + static_cast<std::ptrdiff_t>((s + 1) * H)) > 0.0f
                    ? 1
                    : 0;
  }
  zero(amax_);
  upload_scales();
}

}  // namespace myriad::nn
