// Packet<T, N> — N elements moved as one aligned vector access (16 bytes: 4 f32 or 8 bf16), so a
// warp issues 128-bit loads/stores. The caller guarantees the address is sizeof(Packet)-aligned.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace myriad::cuda::detail {

template <typename T, int N>
struct alignas(sizeof(T) * N) Packet {
  T v[N];
};

template <typename T, int N>
__device__ __forceinline__ Packet<T, N> load_packet(const T* address) {
  return *reinterpret_cast<const Packet<T, N>*>(address);
}

template <typename T, int N>
__device__ __forceinline__ void store_packet(T* address, const Packet<T, N>& packet) {
  *reinterpret_cast<Packet<T, N>*>(address) = packet;
}

// Storage type <-> f32 compute type (bf16 and f16 round to nearest even; f16 past 65504 is inf).
__device__ __forceinline__ float to_f32(float value) { return value; }
__device__ __forceinline__ float to_f32(__nv_bfloat16 value) { return __bfloat162float(value); }
__device__ __forceinline__ float to_f32(__half value) { return __half2float(value); }

template <typename T>
__device__ __forceinline__ T from_f32(float value);
template <>
__device__ __forceinline__ float from_f32<float>(float value) {
  return value;
}
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float value) {
  return __float2bfloat16_rn(value);
}
template <>
__device__ __forceinline__ __half from_f32<__half>(float value) {
  return __float2half_rn(value);
}

}  // namespace myriad::cuda::detail
