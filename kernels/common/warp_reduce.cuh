// Warp-level reductions by xor butterfly: every lane ends with the same, bit-identical total
// (each step adds the same two values on both partner lanes; float addition is commutative), and
// the order depends only on the lane layout, so the result is deterministic. All 32 lanes must
// take part (the caller keeps control flow warp-uniform around the call).
#pragma once

namespace myriad::cuda::detail {

inline constexpr int kWarpSize = 32;
inline constexpr unsigned kFullWarpMask = 0xffffffffu;

__device__ __forceinline__ float warp_sum(float value) {
#pragma unroll
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2) {
    value += __shfl_xor_sync(kFullWarpMask, value, offset);
  }
  return value;
}

}  // namespace myriad::cuda::detail
