// row_max — the largest of n floats, vectorised: max is exact, so the order in which the SIMD
// lanes combine cannot change the result (a serial `m = max(m, x[i])` chain runs at one element
// per max latency: 70 % of the cross-entropy forward over GPT-2's 50257 logits was that loop).
// NaN elements are skipped (a comparison with NaN is false); callers that must propagate a NaN
// row do so through the values they compute from it (exp(NaN - max) is NaN). Empty or all-NaN
// rows give -inf. Internal to src/ops/cpu.
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

}  // namespace myriad::cpu
