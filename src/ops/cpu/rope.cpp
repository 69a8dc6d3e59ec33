// CPU RoPE: a float64-accurate cos / sin table per (t, i), then one pass over the rows.
//
// Forward rotates each pair (i, i + D/2) by +angle, backward by -angle (same code, sin negated).
// Each output pair is computed from the two inputs of that pair only, loaded before either is
// stored, so out may be the input itself. Parallel over (b, t) rows; deterministic (no reductions).

#include "myriad/ops/rope.h"

#include <cmath>
#include <cstdint>
#include <vector>

namespace myriad::cpu {

namespace {

using std::int64_t;

void rotate(const RopeArgs& args, const Tensor& in, Tensor& out, bool inverse) {
  const int64_t B = in.size(0), T = in.size(1), H = in.size(2), D = in.size(3), half = D / 2;
  if (in.numel() == 0) return;
  std::vector<double> inv_freq(static_cast<std::size_t>(half));
  for (int64_t i = 0; i < half; ++i) {
    inv_freq[i] = std::pow(args.theta, -2.0 * static_cast<double>(i) / static_cast<double>(D));
  }
  std::vector<float> cos_table(static_cast<std::size_t>(T * half)), sin_table(static_cast<std::size_t>(T * half));
  const double sign = inverse ? -1.0 : 1.0;
#pragma omp parallel for schedule(static)
  for (int64_t t = 0; t < T; ++t) {
    const double position = static_cast<double>(args.position_offset + t);
    for (int64_t i = 0; i < half; ++i) {
      const double angle = position * inv_freq[i];
      cos_table[t * half + i] = static_cast<float>(std::cos(angle));
      sin_table[t * half + i] = static_cast<float>(sign * std::sin(angle));
    }
  }
  const float* x = in.data<float>();
  float* y = out.data<float>();
  const int64_t xb = in.stride(0), xt = in.stride(1), xh = in.stride(2);
  const int64_t yb = out.stride(0), yt = out.stride(1), yh = out.stride(2);
#pragma omp parallel for schedule(static)
  for (int64_t n = 0; n < B * T; ++n) {
    const int64_t b = n / T, t = n % T;
    const float* c = cos_table.data() + t * half;
    const float* s = sin_table.data() + t * half;
    for (int64_t h = 0; h < H; ++h) {
      const float* xr = x + b * xb + t * xt + h * xh;
      float* yr = y + b * yb + t * yt + h * yh;
#pragma omp simd
      for (int64_t i = 0; i < half; ++i) {
        const float x1 = xr[i], x2 = xr[i + half];
        yr[i] = x1 * c[i] - x2 * s[i];
        yr[i + half] = x2 * c[i] + x1 * s[i];
      }
    }
  }
}

}  // namespace

void rope_forward(const RopeArgs& args, const Tensor& x, Tensor& out) { rotate(args, x, out, false); }

void rope_backward(const RopeArgs& args, const Tensor& grad_out, Tensor& grad_x) {
  rotate(args, grad_out, grad_x, true);
}

}  // namespace myriad::cpu
