// row_max — the largest of n floats, vectorised: max is exact, so the order in which the SIMD
// lanes combine cannot change the result (a serial `m = max(m, x[i])` chain runs at one element
// per max latency: 70 % of the cross-entropy forward over GPT-2's 50257 logits was that loop).
// NaN elements are skipped (a comparison with NaN is false); callers that must propagate a NaN
// row do so through the values they compute from it (exp(NaN - max) is NaN). Empty or all-NaN
// rows give -inf. streamed_row_max is the same maximum read as four parts side by side, for long
// rows that come from memory rather than cache: four streams keep more cache-line fetches in flight
// than one (cross-entropy's rows of 50257 logits). Internal to src/ops/cpu.
#pragma once

#include <cstdint>
#include <limits>

namespace myriad::cpu {

inline float row_max(const float* x, std::int64_t n) {
  float m = -std::numeric_limits<float>::infinity();
#pragma omp simd reduction(max : m)
  for (std::int64_t c = 0; c < n; ++c) m = x[c] > m ? x[c] : m;
  return m;
}

inline float streamed_row_max(const float* x, std::int64_t n) {
  const std::int64_t part = n / 4;
  const float* x1 = x + part;
  const float* x2 = x + 2 * part;
  const float* x3 = x + 3 * part;
  float m0 = -std::numeric_limits<float>::infinity(), m1 = m0, m2 = m0, m3 = m0;
#pragma omp simd reduction(max : m0, m1, m2, m3)
  for (std::int64_t c = 0; c < part; ++c) {
    m0 = x[c] > m0 ? x[c] : m0;
    m1 = x1[c] > m1 ? x1[c] : m1;
    m2 = x2[c] > m2 ? x2[c] : m2;
    m3 = x3[c] > m3 ? x3[c] : m3;
  }
  const float rest = row_max(x + 4 * part, n - 4 * part);
  const float m01 = m0 > m1 ? m0 : m1, m23 = m2 > m3 ? m2 : m3;
  const float m = m01 > m23 ? m01 : m23;
  return rest > m ? rest : m;
}

}  // namespace myriad::cpu
