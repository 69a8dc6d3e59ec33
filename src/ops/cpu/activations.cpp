// CPU GELU / SwiGLU (float32, OpenMP over elements, static schedule: purely elementwise, so
// the result never depends on the thread count). Each element's inputs are read before its
// outputs are written, which makes in-place calls (an output aliasing an input) safe.
// The tanh GELU's per-element math is gelu_math.h's (x * sigmoid(2u), shared with the fused
// linear + GELU passes), and every sigmoid (SwiGLU's too: fast_sigmoid) goes through fast_exp
// (the attention kernels' branch-free exp), so the loops vectorise (the scalar libm tanh and exp
// were a quarter of a serving step's time: docs/performance.md, "Serving").
#include <cmath>

#include "cpu_clones.h"
#include "myriad/ops/activations.h"
#include "parallel_threshold.h"
#include "gelu_math.h"

namespace myriad::cpu {

MYRIAD_CPU_CLONES void gelu_forward(const GeluArgs&, const Tensor& x, Tensor& out) {
  const std::int64_t count = x.numel();
  const float* xp = x.data<float>();
  float* yp = out.data<float>();
#pragma omp parallel for simd schedule(static) if (count >= kParallelMinElements)
  for (std::int64_t i = 0; i < count; ++i) {
    yp[i] = gelu_value(xp[i]);
  }
}

MYRIAD_CPU_CLONES void gelu_backward(const GeluArgs&, const Tensor& x, const Tensor& grad_out, Tensor& grad_x) {
  const std::int64_t count = x.numel();
  const float* xp = x.data<float>();
  const float* dyp = grad_out.data<float>();
  float* dxp = grad_x.data<float>();
#pragma omp parallel for simd schedule(static) if (count >= kParallelMinElements)
  for (std::int64_t i = 0; i < count; ++i) {
    dxp[i] = gelu_gradient(xp[i], dyp[i]);
  }
}

MYRIAD_CPU_CLONES void swiglu_forward(const SwigluArgs&, const Tensor& gate, const Tensor& up, Tensor& out) {
  const std::int64_t count = gate.numel();
  const float* gp = gate.data<float>();
  const float* up_p = up.data<float>();
  float* yp = out.data<float>();
#pragma omp parallel for simd schedule(static) if (count >= kParallelMinElements)
  for (std::int64_t i = 0; i < count; ++i) {
    const float g = gp[i];
    yp[i] = g * fast_sigmoid(g) * up_p[i];
  }
}

MYRIAD_CPU_CLONES void swiglu_backward(const SwigluArgs&, const Tensor& gate, const Tensor& up, const Tensor& grad_out,
                                       Tensor& grad_gate, Tensor& grad_up) {
  const std::int64_t count = gate.numel();
  const float* gp = gate.data<float>();
  const float* up_p = up.data<float>();
  const float* dyp = grad_out.data<float>();
  float* dgp = grad_gate.defined() ? grad_gate.data<float>() : nullptr;
  float* dup = grad_up.defined() ? grad_up.data<float>() : nullptr;
#pragma omp parallel for schedule(static) if (count >= kParallelMinElements)
  for (std::int64_t i = 0; i < count; ++i) {
    const float g = gp[i], u = up_p[i], dy = dyp[i];
    const float s = fast_sigmoid(g);
    // d silu / dg = s + g s (1 - s) = s (1 + g (1 - s))
    const float dgate = dy * u * s * (1.0f + g * (1.0f - s));
    const float dup_value = dy * g * s;
    if (dgp != nullptr) dgp[i] = dgate;
    if (dup != nullptr) dup[i] = dup_value;
  }
}

}  // namespace myriad::cpu
