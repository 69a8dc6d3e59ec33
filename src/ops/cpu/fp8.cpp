// CPU FP8 reference: quantisation through core/fp8.h and the GEMM on operands widened to f32
// (every FP8 value and every product of two is exact in f32; the sums are sgemm's).

#include <algorithm>
#include <array>
#include <cmath>
#include <vector>

#include "myriad/core/error.h"
#include "myriad/core/fp8.h"
#include "myriad/ops/fp8.h"
#include "myriad/ops/cpu_gemm.h"

namespace myriad::cpu {

namespace {

// All 256 codes of a format decoded once per call (a table makes widening a lookup).
std::array<float, 256> decode_table(DType dtype) {
  std::array<float, 256> table{};
  for (unsigned code = 0; code < 256; ++code)
    table[code] = fp8_to_float(static_cast<std::uint8_t>(code), fp8_format(dtype));
  return table;
}

std::vector<float> widened(const Tensor& t) {
  const std::array<float, 256> table = decode_table(t.dtype());
  const auto* codes = static_cast<const std::uint8_t*>(t.raw_data());
  std::vector<float> out(static_cast<std::size_t>(t.numel()));
  const std::int64_t n = t.numel();
#pragma omp parallel for schedule(static) if (n > (1 << 16))
  for (std::int64_t i = 0; i < n; ++i) out[static_cast<std::size_t>(i)] = table[codes[i]];
  return out;
}

}  // namespace

void fp8_quantize(const Tensor& x, const Tensor& scale_tensor, Tensor& out, Tensor& out_t, Tensor& amax) {
  const float scale = *scale_tensor.data<float>();
  MYRIAD_CHECK(std::isfinite(scale) && scale > 0.0f,
               "fp8_quantize: scale must be a positive finite number, got " << scale);
  const Fp8Format& format = fp8_format(out.dtype());
  const std::int64_t C = x.size(-1), N = x.numel() / C;
  const float* in = x.data<float>();
  auto* codes = static_cast<std::uint8_t*>(out.raw_data());
  auto* codes_t = out_t.defined() ? static_cast<std::uint8_t*>(out_t.raw_data()) : nullptr;
  float largest = 0.0f;
  int saw_nan = 0;
#pragma omp parallel for schedule(static) reduction(max : largest) reduction(| : saw_nan) if (N * C > (1 << 16))
  for (std::int64_t r = 0; r < N; ++r) {
    for (std::int64_t c = 0; c < C; ++c) {
      const float value = in[r * C + c];
      saw_nan |= std::isnan(value) ? 1 : 0;
      largest = std::max(largest, std::fabs(value));  // a NaN value leaves it (saw_nan keeps it)
      const std::uint8_t code = float_to_fp8(value * scale, format);
      codes[r * C + c] = code;
      if (codes_t != nullptr) codes_t[c * N + r] = code;
    }
  }
  if (amax.defined()) {
    float& slot = *amax.data<float>();
    slot = saw_nan != 0 || std::isnan(slot) ? NAN : std::max(slot, largest);
  }
}

void fp8_gemm(const Fp8GemmArgs& args, const Tensor& a, const Tensor& a_dequant, const Tensor& b,
              const Tensor& b_dequant, Tensor& out) {
  const float alpha = *a_dequant.data<float>() * *b_dequant.data<float>();
  MYRIAD_CHECK(std::isfinite(alpha), "fp8_gemm: a_dequant x b_dequant must be finite, got " << alpha);
  const std::int64_t M = a.size(0), N = b.size(0), K = a.size(1);
  if (M == 0 || N == 0) return;
  const std::vector<float> wa = widened(a), wb = widened(b);
  float* o = out.data<float>();
  if (K == 0) {
    if (!args.accumulate) std::fill(o, o + M * N, 0.0f);
    return;
  }
  sgemm(false, true, M, N, K, alpha, wa.data(), K, wb.data(), K, args.accumulate ? 1.0f : 0.0f, o, N);
}

}  // namespace myriad::cpu
