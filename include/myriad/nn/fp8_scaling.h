// Fp8Scaling — the per-tensor delayed scaling of training.precision fp8.
//
// Every FP8 linear layer quantises three tensors: its input and weight to E4M3, its output
// gradient to E5M2 (nn/fp8_linear.h). Each tensor (a "slot": linear index x role) has a scale,
// fixed for the whole step, and an amax history. While a step runs, each quantisation folds the
// tensor's max |x| into the slot's amax (a device scalar: no host wait); at the step's end
// (end_step) the amaxes are max-reduced over every rank by the caller, pushed into the histories
// (the last `amax_history` steps) and every scale is recomputed:
//
//   scale = 2^(floor(log2(max_finite / amax)) - margin),  amax = the largest in the history,
//
// a power of two, so scaling is exact and two scales of one tensor round it alike except in the
// subnormal range; a history with no finite positive amax keeps the scale it has. A slot with no
// history yet (the first step) is scaled just in time: its first quantisation measures the
// tensor's own amax first (one host read per slot, that step only). Non-finite amaxes (a NaN or
// inf step) are not recorded. The state is identical on every rank after end_step (the caller's
// reduction covers them all), is saved with checkpoints (state() / load_state()) and is owned by
// the model; its only mutation during a step is the just-in-time scale of an unseen slot.
//
// The scales live twice: on the host (the recipe's arithmetic, the checkpoint) and on the
// placement, with their reciprocals (the GEMMs' dequantisation factors), in buffers allocated once
// and rewritten in place whenever a scale changes. The ops read them there when they run, so a
// micro-batch recorded as a CUDA graph (training.cuda_graphs) replays with every step's scales.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "myriad/core/fp8.h"
#include "myriad/ops/placement.h"

namespace myriad::nn {

struct Fp8Recipe {
  std::int64_t amax_history = 16;  // training.fp8_amax_history: steps whose amax the scale covers
  int margin = 0;                  // training.fp8_margin: powers of two of headroom below the format's max
};

enum class Fp8Role : int { input = 0, weight = 1, grad = 2 };
inline constexpr int kFp8Roles = 3;

// The recipe's scale for a history maximum `amax` (finite, > 0).
float fp8_scale_for(float amax, const Fp8Format& format, int margin);

// What a step's end found: the tensors whose amax exceeded their step's range (amax x scale >
// the format's largest value: their largest values were clipped to it), worst first.
struct Fp8Saturation {
  std::int64_t linear = 0;
  Fp8Role role = Fp8Role::input;
  float amax = 0.0f;   // the step's amax, over every rank
  float range = 0.0f;  // the largest magnitude the step's scale represented: max_finite / scale
};

class Fp8Scaling {
 public:
  Fp8Scaling(const Fp8Recipe& recipe, std::int64_t linears, const ops::Placement& placement);

  const Fp8Recipe& recipe() const { return recipe_; }
  std::int64_t linears() const { return linears_; }
  // The format a role is quantised to: E4M3 for input and weight, E5M2 for the gradient.
  static DType format_of(Fp8Role role) { return role == Fp8Role::grad ? DType::f8e5m2 : DType::f8e4m3; }
  // This step's scale of `linear`'s `role` for tensor `t`: the delayed scale, or just in time
  // from t's own amax when the slot has no history yet (then kept for the rest of the step).
  float scale(std::int64_t linear, Fp8Role role, const Tensor& t);
  // The slot's scale and its reciprocal as 1-element f32 views on the placement (fp8_quantize's
  // scale, fp8_gemm's dequantisation factor); current after scale() for the slot.
  Tensor scale_slot(std::int64_t linear, Fp8Role role) const;
  Tensor dequant_slot(std::int64_t linear, Fp8Role role) const;
  // The slot's amax of this step (a 1-element f32 view on the placement) for fp8_quantize.
  Tensor amax_slot(std::int64_t linear, Fp8Role role) const;
  // All slots' amaxes of this step: (linears * 3) f32 on the placement, slot = linear * 3 + role.
  const Tensor& step_amax() const { return amax_; }
  // The step's end: `reduce_max` turns the host copy of step_amax() into its max over every rank
  // (in place); then histories and scales advance and the step's amaxes are zeroed. Returns the
  // tensors that saturated this step under a delayed scale (worst amax / range first; empty in a
  // healthy step; a just-in-time scale, each rank's own, is not judged).
  std::vector<Fp8Saturation> end_step(const std::function<void(Tensor&)>& reduce_max);

  // The scales (slots) and histories (slots x amax_history, newest last; 0 = none): a host f32
  // tensor of slots * (1 + amax_history) values, and its inverse.
  Tensor state() const;
  void load_state(const Tensor& state);

 private:
  std::size_t slot(std::int64_t linear, Fp8Role role) const;
  // Writes the host scales and their reciprocals into the placement's buffers (in place).
  void upload_scales();

  Fp8Recipe recipe_;
  std::int64_t linears_;
  ops::Placement placement_;
  Tensor amax_;                             // (slots) f32 on the placement
  Tensor device_scales_;                    // (2, slots) f32 on the placement: scales, then reciprocals
  std::vector<float> scales_;               // per slot
  std::vector<float> history_;              // slots x amax_history, newest last
  std::vector<std::uint8_t> known_;         // per slot: a scale is set (delayed, or just in time this step)
  std::vector<std::uint8_t> just_in_time_;  // per slot: its scale was measured this step (not judged)
};

}  // namespace myriad::nn
