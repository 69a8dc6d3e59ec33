// DeviceAdamW: the packed moment buffers, the squared-norm read-back and the per-segment fused
// update (see cuda/device_adamw.h).
#include "myriad/cuda/device_adamw.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "myriad/core/error.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/device_guard.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {

namespace {

DeviceBuffer zeroed_floats(const DeviceContext& context, std::int64_t count) {
  DeviceBuffer buffer(static_cast<std::size_t>(std::max<std::int64_t>(count, 1)) * sizeof(float), context.device());
  MYRIAD_CUDA_CHECK(cudaMemsetAsync(buffer.data(), 0, buffer.bytes(), context.stream()));
  return buffer;
}

void check_state_tensor(const Tensor& t, std::int64_t elements, const char* what) {
  MYRIAD_CHECK(t.defined() && t.device().is_cpu() && t.dtype() == DType::f32 && t.is_contiguous() &&
                   t.numel() == elements,
               "DeviceAdamW: " << what << " must be a contiguous host f32[" << elements << "] (packed moments), got "
                               << (t.defined() ? t.describe() : "undefined"));
}

}  // namespace

DeviceAdamW::DeviceAdamW(const DeviceContext& context, std::vector<DeviceAdamWSegment> segments,
                         std::int64_t grad_elements)
    : context_(context), segments_(std::move(segments)), grad_elements_(grad_elements) {
  MYRIAD_CHECK(grad_elements_ >= 0, "DeviceAdamW: grad_elements " << grad_elements_ << " < 0");
  for (const DeviceAdamWSegment& s : segments_) {
    MYRIAD_CHECK(s.numel >= 0 && s.value_offset >= 0 && s.grad_offset >= 0 && s.grad_offset + s.numel <= grad_elements_,
                 "DeviceAdamW: segment at value " << s.value_offset << ", gradient " << s.grad_offset << " of "
                                                  << s.numel << " elements is outside the gradient buffer of "
                                                  << grad_elements_);
    state_elements_ += s.numel;
    all_counted_ = all_counted_ && s.counted;
  }
  DeviceGuard guard(context_.device());
  m_ = zeroed_floats(context_, state_elements_);
  v_ = zeroed_floats(context_, state_elements_);
  norm_scratch_doubles_ = std::max<std::int64_t>(grad_norm_scratch_doubles(grad_elements_), 1);
  norm_scratch_ = DeviceBuffer(static_cast<std::size_t>(norm_scratch_doubles_) * sizeof(double), context_.device());
  norm_out_ = DeviceBuffer(std::max<std::size_t>(segments_.size(), 1) * sizeof(double), context_.device());
}

double DeviceAdamW::grad_sum_squares(const float* grads) {
  DeviceGuard guard(context_.device());
  if (all_counted_) {
    double sum_squares = 0.0;
    if (grad_elements_ > 0) {
      grad_norm_squared_f32(grads, grad_elements_, norm_scratch_.as<double>(), norm_scratch_doubles_,
                            norm_out_.as<double>(), context_.stream());
      MYRIAD_CUDA_CHECK(cudaMemcpyAsync(&sum_squares, norm_out_.data(), sizeof sum_squares, cudaMemcpyDeviceToHost,
                                        context_.stream()));
    }
    context_.synchronize();
    return sum_squares;
  }
  // One sum per segment (0 for the others), read back in one copy.
  MYRIAD_CUDA_CHECK(cudaMemsetAsync(norm_out_.data(), 0, norm_out_.bytes(), context_.stream()));
  for (std::size_t i = 0; i < segments_.size(); ++i) {
    const DeviceAdamWSegment& s = segments_[i];
    if (!s.counted || s.numel == 0) continue;
    grad_norm_squared_f32(grads + s.grad_offset, s.numel, norm_scratch_.as<double>(), norm_scratch_doubles_,
                          norm_out_.as<double>() + i, context_.stream());
  }
  std::vector<double> sums(segments_.size(), 0.0);
  MYRIAD_CUDA_CHECK(cudaMemcpyAsync(sums.data(), norm_out_.data(), sums.size() * sizeof(double),
                                    cudaMemcpyDeviceToHost, context_.stream()));
  context_.synchronize();
  double sum_squares = 0.0;
  for (double s : sums) sum_squares += s;
  return sum_squares;
}

optim::OptimizerStepStats DeviceAdamW::step(float* values, const float* grads, float lr,
                                            const optim::AdamWConfig& config, double global_sum_squares,
                                            float unscale) {
  optim::OptimizerStepStats stats;
  stats.grad_norm = std::sqrt(global_sum_squares) * static_cast<double>(unscale);  // of the unscaled gradients
  if (!std::isfinite(stats.grad_norm)) {
    stats.skipped = true;
    return stats;
  }
  if (config.grad_clip > 0.0f && stats.grad_norm > config.grad_clip) {
    stats.clip_scale = static_cast<float>(config.grad_clip / stats.grad_norm);
  }
  ++steps_;
  DeviceGuard guard(context_.device());
  std::int64_t packed = 0;
  for (const DeviceAdamWSegment& s : segments_) {
    const bool decays = std::find(config.no_decay.begin(), config.no_decay.end(), s.kind) == config.no_decay.end();
    const AdamWStep update{.lr = lr, .beta1 = config.beta1, .beta2 = config.beta2, .eps = config.eps,
                           .weight_decay = decays ? config.weight_decay : 0.0f,
                           .grad_scale = stats.clip_scale * unscale, .step = steps_};
    adamw_update_f32(values + s.value_offset, grads + s.grad_offset, m_.as<float>() + packed,
                     v_.as<float>() + packed, s.numel, update, context_.stream());
    packed += s.numel;
  }
  return stats;
}

void DeviceAdamW::load_state(const Tensor& m, const Tensor& v, std::int64_t steps_taken) {
  check_state_tensor(m, state_elements_, "m");
  check_state_tensor(v, state_elements_, "v");
  MYRIAD_CHECK(steps_taken >= 0, "DeviceAdamW::load_state: steps_taken " << steps_taken << " < 0");
  DeviceGuard guard(context_.device());
  for (auto [host, device] : {std::pair<const Tensor*, DeviceBuffer*>{&m, &m_}, {&v, &v_}}) {
    MYRIAD_CUDA_CHECK(cudaMemcpyAsync(device->data(), host->raw_data(), host->nbytes(), cudaMemcpyHostToDevice,
                                      context_.stream()));
  }
  context_.synchronize();
  steps_ = steps_taken;
}

void DeviceAdamW::state_to_host(Tensor& m, Tensor& v) const {
  check_state_tensor(m, state_elements_, "m");
  check_state_tensor(v, state_elements_, "v");
  DeviceGuard guard(context_.device());
  for (auto [host, device] : {std::pair<Tensor*, const DeviceBuffer*>{&m, &m_}, {&v, &v_}}) {
    MYRIAD_CUDA_CHECK(cudaMemcpyAsync(host->raw_data(), device->data(), host->nbytes(), cudaMemcpyDeviceToHost,
                                      context_.stream()));
  }
  context_.synchronize();
}

}  // namespace myriad::cuda
