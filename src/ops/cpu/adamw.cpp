// CPU AdamW: one elementwise pass (parallel over elements, so trivially deterministic) with
// the bias corrections folded into two per-step scalars computed in float64:
//   p -= (lr / (1 - beta1^t)) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
// which equals lr * m_hat / (sqrt(v_hat) + eps). grad_norm_squared sums fixed blocks of
// kNormBlock elements in float64 (four parts of 8 independent lanes per block, combined in a
// fixed order), then the block sums in block order: the value does not depend on the thread count.
// Compute copies (ops/adamw.h) are written by the same loop, per element, from the updated value
// (bf16: vectorised; f16's conversion is an out-of-line call per element).
#include <algorithm>
#include <cmath>
#include <vector>

#include "cpu_clones.h"
#include "myriad/core/half.h"
#include "myriad/ops/adamw.h"
#include "parallel_threshold.h"

namespace myriad::cpu {

namespace {

constexpr std::int64_t kNormBlock = 1 << 14;  // elements per partial sum (fixed: thread-count independent)
constexpr int kNormLanes = 8;
constexpr int kNormStreams = 4;  // parts of a block read side by side

// The block is read as kNormStreams equal parts side by side (each part's 8 lanes apart), then
// what is left past the parts into part 0's lanes; the lanes are summed part by part, in order.
// Several streams keep more cache-line fetches in flight than one: a 124M-parameter gradient read
// in 30 ms as one stream per thread and in 22 ms as four (2-vCPU Xeon VM, 2026-12-07).
MYRIAD_CPU_CLONES double block_sum_of_squares(const float* x, std::int64_t count) {
  const std::int64_t part = count / kNormStreams / kNormLanes * kNormLanes;
  double lane[kNormStreams][kNormLanes] = {};
  for (std::int64_t i = 0; i < part; i += kNormLanes) {
    for (int s = 0; s < kNormStreams; ++s) {
      const float* y = x + s * part + i;
      for (int l = 0; l < kNormLanes; ++l) lane[s][l] += static_cast<double>(y[l]) * static_cast<double>(y[l]);
    }
  }
  int l = 0;
  for (std::int64_t i = kNormStreams * part; i < count; ++i, l = (l + 1) % kNormLanes) {
    lane[0][l] += static_cast<double>(x[i]) * static_cast<double>(x[i]);
  }
  double sum = 0.0;
  for (const auto& lanes : lane) {
    for (double partial : lanes) sum += partial;  // part by part, in lane order
  }
  return sum;
}

// The 16-bit number nearest p, and its value.
template <DType Format>
std::uint16_t narrow_of(float p) {
  if constexpr (Format == DType::bf16) {
    return float_to_bf16(p);
  } else {
    return float_to_f16(p);
  }
}
template <DType Format>
float widen(std::uint16_t h) {
  if constexpr (Format == DType::bf16) {
    return bf16_to_float(h);
  } else {
    return f16_to_float(h);
  }
}

// The update's per-element math, writing each updated value to the param and to the copies the
// template flags name (compile-time, so the loop has no branch and no call: it vectorises with
// contiguous stores — through a store callback the compiler scattered them).
template <DType Format, bool kRounded, bool kNarrow>
MYRIAD_CPU_CLONES void update_loop(const AdamWArgs& args, std::int64_t n, const float* g_in, float* p, float* m1,
                                   float* m2, float* rounded, std::uint16_t* narrow) {
  const double t = static_cast<double>(args.step);
  const double bias1 = 1.0 - std::pow(static_cast<double>(args.beta1), t);
  const double bias2 = 1.0 - std::pow(static_cast<double>(args.beta2), t);
  const float step_size = static_cast<float>(static_cast<double>(args.lr) / bias1);
  const float inv_sqrt_bias2 = static_cast<float>(1.0 / std::sqrt(bias2));
  const float lr_wd = static_cast<float>(static_cast<double>(args.lr) * static_cast<double>(args.weight_decay));
  const float b1 = args.beta1, b2 = args.beta2, one_minus_b1 = 1.0f - b1, one_minus_b2 = 1.0f - b2;
  const float eps = args.eps, scale = args.grad_scale;
#pragma omp parallel for simd schedule(static) if (n >= kParallelMinElements)
  for (std::int64_t i = 0; i < n; ++i) {
    const float g = g_in[i] * scale;
    const float decayed = p[i] - lr_wd * p[i];
    const float mi = b1 * m1[i] + one_minus_b1 * g;
    const float vi = b2 * m2[i] + one_minus_b2 * (g * g);
    m1[i] = mi;
    m2[i] = vi;
    const float value = decayed - step_size * mi / (std::sqrt(vi) * inv_sqrt_bias2 + eps);
    p[i] = value;
    if constexpr (kRounded || kNarrow) {
      const std::uint16_t h = narrow_of<Format>(value);
      if constexpr (kNarrow) narrow[i] = h;
      if constexpr (kRounded) rounded[i] = widen<Format>(h);
    }
  }
}

template <DType Format>
void update_with_copies(const AdamWArgs& args, std::int64_t n, const float* g, float* p, float* m, float* v,
                        const AdamWCopies& copies) {
  float* rounded = copies.rounded.defined() ? copies.rounded.data<float>() : nullptr;
  auto* narrow = copies.narrow.defined() ? static_cast<std::uint16_t*>(copies.narrow.raw_data()) : nullptr;
  if (rounded != nullptr && narrow != nullptr) {
    update_loop<Format, true, true>(args, n, g, p, m, v, rounded, narrow);
  } else if (rounded != nullptr) {
    update_loop<Format, true, false>(args, n, g, p, m, v, rounded, narrow);
  } else {
    update_loop<Format, false, true>(args, n, g, p, m, v, rounded, narrow);
  }
}

}  // namespace

void adamw_update(const AdamWArgs& args, Tensor& param, const Tensor& grad, Tensor& m, Tensor& v,
                  const AdamWCopies& copies) {
  const std::int64_t n = param.numel();
  float* p = param.data<float>();
  const float* g = grad.data<float>();
  float* m1 = m.data<float>();
  float* m2 = v.data<float>();
  if (!copies.any()) {
    update_loop<DType::f32, false, false>(args, n, g, p, m1, m2, nullptr, nullptr);
  } else if (copies.format == DType::bf16) {
    update_with_copies<DType::bf16>(args, n, g, p, m1, m2, copies);
  } else {
    update_with_copies<DType::f16>(args, n, g, p, m1, m2, copies);
  }
}

double grad_norm_squared(const Tensor& grad_in) {
  const Tensor grad = grad_in.contiguous();
  const float* x = grad.data<float>();
  const std::int64_t n = grad.numel();
  const std::int64_t blocks = (n + kNormBlock - 1) / kNormBlock;
  std::vector<double> partial(static_cast<std::size_t>(blocks));
#pragma omp parallel for schedule(static) if (blocks > 1)
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::int64_t begin = b * kNormBlock;
    partial[static_cast<std::size_t>(b)] = block_sum_of_squares(x + begin, std::min(kNormBlock, n - begin));
  }
  double sum = 0.0;
  for (double s : partial) sum += s;
  return sum;
}

}  // namespace myriad::cpu
