// CPU weight-only INT8: quantisation, dequantisation, and the linear layer as BLAS GEMMs over
// blocks of dequantised weight rows (a kRows x K f32 buffer per block; the whole f32 weight never
// exists). Rows of a block are dequantised in parallel.

#include <algorithm>
#include <cmath>
#include <vector>

#include "myriad/ops/bias_add.h"
#include "myriad/ops/int8_linear.h"
#include "myriad/ops/cpu_gemm.h"

namespace myriad::cpu {

namespace {

constexpr std::int64_t kRows = 128;  // weight rows dequantised per GEMM

// Dequantises rows [first, first + count) of q into out (count x K).
void dequantize_rows(const std::int8_t* q, const float* scales, std::int64_t K, std::int64_t group, std::int64_t groups,
                     std::int64_t first, std::int64_t count, float* out) {
#pragma omp parallel for schedule(static)
  for (std::int64_t r = 0; r < count; ++r) {
    const std::int8_t* row = q + (first + r) * K;
    const float* s = scales + (first + r) * groups;
    float* o = out + r * K;
    for (std::int64_t k = 0; k < K; ++k) o[k] = static_cast<float>(row[k]) * s[group == 0 ? 0 : k / group];
  }
}

}  // namespace

void quantize_int8(const Int8Args& args, const Tensor& weight, Tensor& q, Tensor& scales) {
  const std::int64_t N = weight.size(0), K = weight.size(1), G = int8_groups(K, args.group_size);
  const std::int64_t width = args.group_size == 0 ? K : args.group_size;
  const float* w = weight.data<float>();
  auto* out = q.data<std::int8_t>();
  float* s = scales.data<float>();
#pragma omp parallel for schedule(static)
  for (std::int64_t n = 0; n < N; ++n) {
    for (std::int64_t g = 0; g < G; ++g) {
      const std::int64_t begin = g * width, end = std::min(K, begin + width);
      float amax = 0.0f;
      for (std::int64_t k = begin; k < end; ++k) amax = std::max(amax, std::abs(w[n * K + k]));
      const float scale = amax / 127.0f;
      s[n * G + g] = scale;
      for (std::int64_t k = begin; k < end; ++k) {
        const long v = scale > 0.0f ? std::lround(w[n * K + k] / scale) : 0L;
        out[n * K + k] = static_cast<std::int8_t>(std::clamp(v, -127L, 127L));
      }
    }
  }
}

void dequantize_int8(const Int8Args& args, const Tensor& q, const Tensor& scales, Tensor& weight) {
  const std::int64_t N = q.size(0), K = q.size(1);
  dequantize_rows(q.data<std::int8_t>(), scales.data<float>(), K, args.group_size, int8_groups(K, args.group_size), 0,
                  N, weight.data<float>());
}

void int8_linear_forward(const Int8Args& args, const Tensor& x, const Tensor& q, const Tensor& scales,
                         const Tensor& bias, Tensor& y) {
  const std::int64_t N = q.size(0), K = q.size(1), rows = K == 0 ? 0 : x.numel() / K;
  const std::int64_t groups = int8_groups(K, args.group_size);
  std::vector<float> block(static_cast<std::size_t>(std::min(kRows, N) * K));
  float* out = y.data<float>();
  if (K == 0) std::fill(out, out + y.numel(), 0.0f);
  for (std::int64_t first = 0; first < N && K > 0; first += kRows) {
    const std::int64_t count = std::min(kRows, N - first);
    dequantize_rows(q.data<std::int8_t>(), scales.data<float>(), K, args.group_size, groups, first, count,
                    block.data());
    // y[:, first:first+count] = x (rows x K) @ block^T (K x count); y's leading dimension is N.
    sgemm(false, true, rows, count, K, 1.0f, x.data<float>(), K, block.data(), K, 0.0f, out + first, N);
  }
  if (bias.defined()) cpu::bias_add_forward(BiasAddArgs{}, y, bias, y);
}

}  // namespace myriad::cpu
