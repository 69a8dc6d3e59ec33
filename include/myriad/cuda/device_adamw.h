// DeviceAdamW — optim::AdamWOptimizer's update on the GPU: fp32 master values, gradients and
// moments in device memory, global-norm clipping, decoupled weight decay skipped for the
// AdamWConfig::no_decay kinds, one fused update kernel per segment (kernels.h adamw_update_f32).
//
// A segment is a contiguous piece of one parameter: its place in the values buffer, its place in
// the gradient buffer (the same for a whole model, the shard position under ZeRO) and its kind.
// The moments m and v hold the segments back to back in the order given ("packed"), exactly as
// AdamWOptimizer does, so load_state / state_to_host exchange AdamWOptimizer::m() / v() as they are:
// whole parameters in store order for one replica, the ZeRO shard's segments for a dp rank.
//
// A step is split so that data parallelism can sum over ranks in between: grad_sum_squares()
// reads back this rank's squared norm (float64, one synchronisation), the caller sums it over the
// ranks that share the model, and step() applies the update with that global sum — a non-finite
// norm skips it (values, moments and the step count untouched), as on the CPU.
#pragma once

#include <cstdint>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/cuda/device_buffer.h"
#include "myriad/cuda/device_context.h"
#include "myriad/nn/parameter_store.h"
#include "myriad/optim/adamw_optimizer.h"

namespace myriad::cuda {

struct DeviceAdamWSegment {
  std::int64_t value_offset = 0;  // into the values buffer (f32 elements)
  std::int64_t grad_offset = 0;   // into the gradient buffer
  std::int64_t numel = 0;
  nn::ParamKind kind = nn::ParamKind::weight;
  // In grad_sum_squares (false for a replica another tensor-parallel rank counts:
  // nn::Parameter::primary), as optim::OptimizerSegment::counted.
  bool counted = true;
};

class DeviceAdamW {
 public:
  // `grad_elements`: the length of the gradient buffers grad_sum_squares() will read.
  DeviceAdamW(const DeviceContext& context, std::vector<DeviceAdamWSegment> segments, std::int64_t grad_elements);

  // Sum of squares of the gradients in float64, synchronises: all of grads[0, grad_elements)
  // (padding must hold zeros) when every segment is counted, else the counted segments' (each
  // summed on the device, the sums added on the host in segment order).
  double grad_sum_squares(const float* grads);
  // The update of AdamWOptimizer::step(lr, global_sum_squares, unscale): grad_norm =
  // sqrt(global_sum_squares) x unscale, clip scale from config.grad_clip, gradients scaled by
  // clip x unscale inside the update. values / grads: device buffers the segments index.
  optim::OptimizerStepStats step(float* values, const float* grads, float lr, const optim::AdamWConfig& config,
                                 double global_sum_squares, float unscale = 1.0f);

  std::int64_t state_elements() const { return state_elements_; }  // length of packed m / v
  const std::vector<DeviceAdamWSegment>& segments() const { return segments_; }
  std::int64_t steps_taken() const { return steps_; }
  // Host f32 [state_elements()] moments in the packed layout; steps_taken >= 0.
  void load_state(const Tensor& m, const Tensor& v, std::int64_t steps_taken);
  void state_to_host(Tensor& m, Tensor& v) const;

 private:
  const DeviceContext& context_;
  std::vector<DeviceAdamWSegment> segments_;
  std::int64_t grad_elements_ = 0, state_elements_ = 0, steps_ = 0;
  DeviceBuffer m_, v_;
  bool all_counted_ = true;
  DeviceBuffer norm_scratch_, norm_out_;  // doubles (norm_out_: one per segment)
  std::int64_t norm_scratch_doubles_ = 0;
};

}  // namespace myriad::cuda
