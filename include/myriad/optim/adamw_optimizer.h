// AdamWOptimizer — AdamW over a list of segments (value/gradient pairs), with global-norm clipping.
//
// A segment is a contiguous piece of one parameter: the whole parameter in a single process, or
// the part of it inside this rank's ZeRO shard. Moments m and v are flat f32 buffers holding the
// segments back to back (so they are exactly as large as the state this rank owns). Weight decay
// is decoupled and skipped for the parameter kinds listed in `no_decay` (norm, bias, embedding).
// step(lr, global_sum_squares): the caller supplies the squared global gradient norm (the sum of
// grad_sum_squares() over the ranks that share the model; step(lr) uses this rank's own);
// clip scale = min(1, grad_clip / norm) (grad_clip 0 = off) folded into the update's grad_scale;
// a non-finite norm skips the update and is reported. The caller zeroes gradients afterwards.
// Compute copies (16-bit training, ops/adamw.h): once set_compute_copies gave every segment its
// views of the weights the model computes with, each update writes them in its own pass (no cast
// pass after the step) and says so (OptimizerStepStats::compute_copies_written).
#pragma once

#include <utility>
#include <vector>

#include "myriad/nn/parameter_store.h"
#include "myriad/ops/adamw.h"

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
  double grad_norm = 0.0;               // before clipping
  float clip_scale = 1.0f;              // applied to the gradients in the update
  bool skipped = false;                 // non-finite gradient norm: parameters untouched
  bool compute_copies_written = false;  // the update also wrote every segment's compute copies
};

struct OptimizerSegment {
  Tensor value, grad;  // same shape, contiguous f32
  nn::ParamKind kind = nn::ParamKind::weight;
  bool counted = true;  // in grad_sum_squares (false for a copy another rank counts: Parameter::primary)
  bool expert = false;  // an MoE expert's (ep ranks hold different ones): grad_sum_squares(true)
};

// The norm (sqrt(global_sum_squares) * unscale), whether it is non-finite (skip) and the clip
// scale min(1, grad_clip / norm) of one step — shared by AdamW and 1-bit Adam.
OptimizerStepStats clipping(const AdamWConfig& config, double global_sum_squares, float unscale);

// One segment per parameter of the store.
std::vector<OptimizerSegment> whole_parameter_segments(nn::ParameterStore& store);

class AdamWOptimizer {
 public:
  AdamWOptimizer(nn::ParameterStore& store, const AdamWConfig& config);
  AdamWOptimizer(std::vector<OptimizerSegment> segments, const AdamWConfig& config);

  double grad_sum_squares() const;  // over this optimizer's segments, float64, fixed order
  // {the non-expert segments', the expert segments'}: each as grad_sum_squares(bool) would give,
  // read in one transfer where the gradients live on a device.
  std::pair<double, double> grad_sum_squares_by_kind() const;
  OptimizerStepStats step(float lr) { return step(lr, grad_sum_squares()); }
  // `unscale` multiplies every gradient first (1 / loss scale under fp16 loss scaling); the norm
  // reported and clipped is that of the unscaled gradients.
  OptimizerStepStats step(float lr, double global_sum_squares, float unscale = 1.0f);
  // The compute copies of each segment, in segment order (see the file comment): f32 rounded
  // values and `format` (bf16 / f16) values of each segment's shape.
  void set_compute_copies(DType format, std::vector<Tensor> rounded, std::vector<Tensor> narrow);
  bool writes_compute_copies() const { return !copies_.empty(); }
  std::int64_t steps_taken() const { return steps_; }
  void set_steps_taken(std::int64_t steps) { steps_ = steps; }
  Tensor& m() { return m_; }
  const std::vector<OptimizerSegment>& segments() const { return segments_; }
  Tensor& v() { return v_; }
  bool decays(nn::ParamKind kind) const;
  const AdamWConfig& config() const { return config_; }
  std::vector<OptimizerSegment>& segments() { return segments_; }
  std::int64_t state_elements() const { return m_.defined() ? m_.numel() : 0; }
  // Frees the moments and drops the segments (their views of the parameters): an engine that only
  // serves (weight-only INT8) never steps again.
  void release_state() {
    segments_.clear();
    copies_.clear();
    m_ = Tensor();
    v_ = Tensor();
  }

 private:
  // Over the counted segments in order: {all, or the non-expert ones; the expert ones}.
  std::pair<double, double> sum_squares_of(bool split_experts) const;
  std::vector<OptimizerSegment> segments_;
  std::vector<AdamWCopies> copies_;  // per segment when set (set_compute_copies); empty: none
  AdamWConfig config_;
  Tensor m_, v_;
  std::int64_t steps_ = 0;
};

}  // namespace myriad::optim
