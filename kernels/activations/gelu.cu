// GELU, GPT-2 tanh approximation, forward and backward on the GPU (f32 and bf16 storage; the
// forward also from f32 into bf16 / f16, rounded once).
//
//   u = sqrt(2/pi) (x + 0.044715 x^3),  gelu(x) = 0.5 x (1 + tanh(u))
//   gelu'(x) = 0.5 (1 + tanh(u)) + 0.5 x sech^2(u) sqrt(2/pi) (1 + 3 * 0.044715 x^2)
//
// Math is f32 for both storage types. sech^2(u) is computed as 1 / cosh^2(u), not 1 - tanh^2(u):
// the latter cancels to the absolute error of tanhf near saturation (|x| > 3), which x then
// amplifies; 1 / cosh^2 keeps a small relative error and cleanly underflows to 0 for large |u|.
// Threads own one 16-byte packet each when every buffer is 16-byte aligned (4 f32 / 8 bf16:
// 128-bit loads), one element otherwise; the single packet that crosses n is finished element by
// element by its thread. Each element is read and then written by the same thread, which is what
// makes in-place calls safe. grad_x is written (`=`), as for every activation gradient.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "common/launch_checks.h"
#include "common/packet.cuh"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

using detail::from_f32;
using detail::to_f32;

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
constexpr int kThreadsPerBlock = 256;

__device__ __forceinline__ float gelu_value(float x) {
  const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
  return 0.5f * x * (1.0f + tanhf(u));
}

__device__ __forceinline__ float gelu_derivative(float x) {
  const float x2 = x * x;
  const float u = kSqrt2OverPi * x * (1.0f + kGeluCubic * x2);
  const float cosh_u = coshf(u);
  const float sech2 = 1.0f / (cosh_u * cosh_u);
  return 0.5f * (1.0f + tanhf(u)) + 0.5f * x * sech2 * kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x2);
}

// In: the input's storage type; Out: the output's (In, or a 16-bit format for an f32 input).
template <typename In, typename Out, int kPack>
__global__ void gelu_forward_elementwise(const In* x, Out* out, std::int64_t n) {
  const std::int64_t first = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kPack;
  if (first >= n) return;
  if (first + kPack <= n) {
    const auto in = detail::load_packet<In, kPack>(x + first);
    detail::Packet<Out, kPack> result;
#pragma unroll
    for (int k = 0; k < kPack; ++k) result.v[k] = from_f32<Out>(gelu_value(to_f32(in.v[k])));
    detail::store_packet<Out, kPack>(out + first, result);
  } else {
    for (std::int64_t i = first; i < n; ++i) out[i] = from_f32<Out>(gelu_value(to_f32(x[i])));
  }
}

// X: x's and grad_x's type; G: grad_out's (f32 with a 16-bit x: a kept pre-activation's gradient).
template <typename X, typename G, int kPack>
__global__ void gelu_backward_elementwise(const X* x, const G* grad_out, X* grad_x, std::int64_t n) {
  const std::int64_t first = (static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) * kPack;
  if (first >= n) return;
  if (first + kPack <= n) {
    const auto xs = detail::load_packet<X, kPack>(x + first);
    const auto gs = detail::load_packet<G, kPack>(grad_out + first);
    detail::Packet<X, kPack> result;
#pragma unroll
    for (int k = 0; k < kPack; ++k) result.v[k] = from_f32<X>(gelu_derivative(to_f32(xs.v[k])) * to_f32(gs.v[k]));
    detail::store_packet<X, kPack>(grad_x + first, result);
  } else {
    for (std::int64_t i = first; i < n; ++i)
      grad_x[i] = from_f32<X>(gelu_derivative(to_f32(x[i])) * to_f32(grad_out[i]));
  }
}

template <typename T>
constexpr int kPackOf = 16 / static_cast<int>(sizeof(T));

// Packets of kPackOf<In> elements (16 bytes of input); a narrower output's packets are smaller
// (8 bytes of bf16 for 4 f32) and aligned to their own size.
template <typename In, typename Out>
void launch_gelu_forward(const char* op, const In* x, Out* out, std::int64_t n, cudaStream_t stream) {
  detail::check_count(op, "n", n);
  if (n == 0) return;
  detail::check_pointer(op, "x", x, alignof(In));
  detail::check_pointer(op, "out", out, alignof(Out));
  constexpr int kPack = kPackOf<In>;
  const bool packed = detail::is_aligned(x, 16) && detail::is_aligned(out, sizeof(Out) * kPack);
  const int pack = packed ? kPack : 1;
  const unsigned blocks = detail::grid_blocks(op, detail::ceil_div(n, pack), kThreadsPerBlock);
  if constexpr (std::is_same_v<In, Out>) {
    detail::check_same_or_disjoint(op, "out", out, "x", x, static_cast<std::size_t>(n) * sizeof(In));
  } else {
    detail::check_disjoint(op, "out", out, static_cast<std::size_t>(n) * sizeof(Out), "x", x,
                           static_cast<std::size_t>(n) * sizeof(In));
  }
  if (packed) {
    gelu_forward_elementwise<In, Out, kPack><<<blocks, kThreadsPerBlock, 0, stream>>>(x, out, n);
  } else {
    gelu_forward_elementwise<In, Out, 1><<<blocks, kThreadsPerBlock, 0, stream>>>(x, out, n);
  }
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

// Packets of kPackOf<G> elements (16 bytes of grad_out); a narrower x's packets are smaller and
// aligned to their own size.
template <typename X, typename G>
void launch_gelu_backward(const char* op, const X* x, const G* grad_out, X* grad_x, std::int64_t n,
                          cudaStream_t stream) {
  detail::check_count(op, "n", n);
  if (n == 0) return;
  detail::check_pointer(op, "x", x, alignof(X));
  detail::check_pointer(op, "grad_out", grad_out, alignof(G));
  detail::check_pointer(op, "grad_x", grad_x, alignof(X));
  constexpr int kPack = kPackOf<G>;
  const bool packed = detail::is_aligned(x, sizeof(X) * kPack) && detail::is_aligned(grad_out, 16) &&
                      detail::is_aligned(grad_x, sizeof(X) * kPack);
  const int pack = packed ? kPack : 1;
  const unsigned blocks = detail::grid_blocks(op, detail::ceil_div(n, pack), kThreadsPerBlock);
  const std::size_t x_bytes = static_cast<std::size_t>(n) * sizeof(X);
  detail::check_same_or_disjoint(op, "grad_x", grad_x, "x", x, x_bytes);
  if constexpr (std::is_same_v<X, G>) {
    detail::check_same_or_disjoint(op, "grad_x", grad_x, "grad_out", grad_out, x_bytes);
  } else {
    detail::check_disjoint(op, "grad_x", grad_x, x_bytes, "grad_out", grad_out,
                           static_cast<std::size_t>(n) * sizeof(G));
  }
  if (packed) {
    gelu_backward_elementwise<X, G, kPack><<<blocks, kThreadsPerBlock, 0, stream>>>(x, grad_out, grad_x, n);
  } else {
    gelu_backward_elementwise<X, G, 1><<<blocks, kThreadsPerBlock, 0, stream>>>(x, grad_out, grad_x, n);
  }
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void gelu_forward_f32(const float* x, float* out, std::int64_t n, cudaStream_t stream) {
  launch_gelu_forward("gelu_forward_f32", x, out, n, stream);
}

void gelu_forward_bf16(const __nv_bfloat16* x, __nv_bfloat16* out, std::int64_t n, cudaStream_t stream) {
  launch_gelu_forward("gelu_forward_bf16", x, out, n, stream);
}

void gelu_forward_f32(const float* x, __nv_bfloat16* out, std::int64_t n, cudaStream_t stream) {
  launch_gelu_forward("gelu_forward_f32 (bf16 out)", x, out, n, stream);
}

void gelu_forward_f32(const float* x, __half* out, std::int64_t n, cudaStream_t stream) {
  launch_gelu_forward("gelu_forward_f32 (f16 out)", x, out, n, stream);
}

void gelu_forward_f16(const __half* x, __half* out, std::int64_t n, cudaStream_t stream) {
  launch_gelu_forward("gelu_forward_f16", x, out, n, stream);
}

void gelu_backward_f32(const float* x, const float* grad_out, float* grad_x, std::int64_t n, cudaStream_t stream) {
  launch_gelu_backward("gelu_backward_f32", x, grad_out, grad_x, n, stream);
}

void gelu_backward_bf16(const __nv_bfloat16* x, const __nv_bfloat16* grad_out, __nv_bfloat16* grad_x, std::int64_t n,
                        cudaStream_t stream) {
  launch_gelu_backward("gelu_backward_bf16", x, grad_out, grad_x, n, stream);
}

void gelu_backward_f32(const __nv_bfloat16* x, const float* grad_out, __nv_bfloat16* grad_x, std::int64_t n,
                       cudaStream_t stream) {
  launch_gelu_backward("gelu_backward_f32 (bf16 x)", x, grad_out, grad_x, n, stream);
}

void gelu_backward_f32(const __half* x, const float* grad_out, __half* grad_x, std::int64_t n, cudaStream_t stream) {
  launch_gelu_backward("gelu_backward_f32 (f16 x)", x, grad_out, grad_x, n, stream);
}

}  // namespace myriad::cuda
