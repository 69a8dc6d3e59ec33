// SwiGLU, elementwise over n values (the op of ops/activations.h), math in f32: gate and up f32,
// or bf16 / f16 (widened where read); the forward's output f32, or bf16 / f16 rounded once:
//   out = silu(g) * u,  silu(g) = g / (1 + exp(-g))
//   backward: grad_g = grad_out * u * s * (1 + g (1 - s)) with s = sigmoid(g);  grad_u = grad_out * silu(g)
// Grid-stride loop; an output may be the buffer of an input of the same position (in place);
// grad_gate or grad_up may be null to skip it. The forward's output and the backward's gradients
// may be bf16 / f16 (rounded once at the store; then they overlap no input).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "common/launch_checks.h"
#include "common/packet.cuh"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kThreads = 256;

// In, Out: float, or __nv_bfloat16 / __half (In widened where read; Out the f32 value rounded once
// at the store).
template <typename In, typename Out>
__global__ void swiglu_forward_kernel(const In* gate, const In* up, Out* out, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = detail::to_f32(gate[i]);
    out[i] = detail::from_f32<Out>(g / (1.0f + expf(-g)) * detail::to_f32(up[i]));
  }
}

// An output of the inputs' type may be an input's buffer (in place); another type overlaps none.
template <typename In, typename Out>
void launch_swiglu_forward(const char* op, const In* gate, const In* up, Out* out, std::int64_t n,
                           cudaStream_t stream) {
  detail::check_count(op, "n", n);
  if (n == 0) return;
  if constexpr (std::is_same_v<In, Out>) {
    detail::check_elementwise<In>(op, {{"gate", gate}, {"up", up}}, "out", out, n);
  } else {
    detail::check_pointer(op, "gate", gate, alignof(In));
    detail::check_pointer(op, "up", up, alignof(In));
    detail::check_pointer(op, "out", out, alignof(Out));
    const std::size_t in_bytes = static_cast<std::size_t>(n) * sizeof(In);
    const std::size_t out_bytes = static_cast<std::size_t>(n) * sizeof(Out);
    detail::check_disjoint(op, "out", out, out_bytes, "gate", gate, in_bytes);
    detail::check_disjoint(op, "out", out, out_bytes, "up", up, in_bytes);
  }
  swiglu_forward_kernel<In, Out>
      <<<detail::grid_stride_blocks(op, n, kThreads), kThreads, 0, stream>>>(gate, up, out, n);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

// In: float, or __nv_bfloat16 / __half (widened); Grad: float, or __nv_bfloat16 / __half (each
// gradient's f32 value rounded once at the store).
template <typename In, typename Grad>
__global__ void swiglu_backward_kernel(const In* gate, const In* up, const float* grad_out, Grad* grad_gate,
                                       Grad* grad_up, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float g = detail::to_f32(gate[i]), u = detail::to_f32(up[i]), go = grad_out[i];
    const float s = 1.0f / (1.0f + expf(-g));
    if (grad_gate != nullptr) grad_gate[i] = detail::from_f32<Grad>(go * u * s * (1.0f + g * (1.0f - s)));
    if (grad_up != nullptr) grad_up[i] = detail::from_f32<Grad>(go * g * s);
  }
}

unsigned blocks_for(const char* op, std::int64_t n) { return detail::grid_stride_blocks(op, n, kThreads); }

}  // namespace

void swiglu_forward_f32(const float* gate, const float* up, float* out, std::int64_t n, cudaStream_t stream) {
  launch_swiglu_forward("swiglu_forward_f32", gate, up, out, n, stream);
}

void swiglu_forward_f32(const float* gate, const float* up, __nv_bfloat16* out, std::int64_t n, cudaStream_t stream) {
  launch_swiglu_forward("swiglu_forward_f32 (bf16 out)", gate, up, out, n, stream);
}

void swiglu_forward_f32(const float* gate, const float* up, __half* out, std::int64_t n, cudaStream_t stream) {
  launch_swiglu_forward("swiglu_forward_f32 (f16 out)", gate, up, out, n, stream);
}

namespace {

// A 16-bit gradient may not overlap an input (it is narrower); an f32 one may be an f32 input's buffer.
template <typename In, typename Grad>
void launch_swiglu_backward(const char* op, const In* gate, const In* up, const float* grad_out, Grad* grad_gate,
                            Grad* grad_up, std::int64_t n, cudaStream_t stream) {
  detail::check_count(op, "n", n);
  if (n == 0 || (grad_gate == nullptr && grad_up == nullptr)) return;
  detail::check_pointer(op, "gate", gate, alignof(In));
  detail::check_pointer(op, "up", up, alignof(In));
  detail::check_pointer(op, "grad_out", grad_out, alignof(float));
  detail::check_optional_pointer(op, "grad_gate", grad_gate, alignof(Grad));
  detail::check_optional_pointer(op, "grad_up", grad_up, alignof(Grad));
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
  const std::size_t in_bytes = static_cast<std::size_t>(n) * sizeof(In);
  const std::size_t grad_bytes = static_cast<std::size_t>(n) * sizeof(Grad);
  for (Grad* grad : {grad_gate, grad_up}) {
    if (grad == nullptr) continue;
    for (auto [name, input, input_bytes] : {std::tuple<const char*, const void*, std::size_t>{"gate", gate, in_bytes},
                                            {"up", up, in_bytes},
                                            {"grad_out", grad_out, bytes}}) {
      if constexpr (std::is_same_v<Grad, float> && std::is_same_v<In, float>) {
        detail::check_same_or_disjoint(op, "a gradient", grad, name, input, bytes);
      } else {
        detail::check_disjoint(op, "a gradient", grad, grad_bytes, name, input, input_bytes);
      }
    }
  }
  MYRIAD_CHECK(grad_gate == nullptr || grad_gate != grad_up, op << ": grad_gate and grad_up are the same buffer");
  swiglu_backward_kernel<In, Grad>
      <<<blocks_for(op, n), kThreads, 0, stream>>>(gate, up, grad_out, grad_gate, grad_up, n);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void swiglu_backward_f32(const float* gate, const float* up, const float* grad_out, float* grad_gate, float* grad_up,
                         std::int64_t n, cudaStream_t stream) {
  launch_swiglu_backward("swiglu_backward_f32", gate, up, grad_out, grad_gate, grad_up, n, stream);
}

void swiglu_backward_f32(const float* gate, const float* up, const float* grad_out, __nv_bfloat16* grad_gate,
                         __nv_bfloat16* grad_up, std::int64_t n, cudaStream_t stream) {
  launch_swiglu_backward("swiglu_backward_f32 (bf16 gradients)", gate, up, grad_out, grad_gate, grad_up, n, stream);
}

void swiglu_backward_f32(const float* gate, const float* up, const float* grad_out, __half* grad_gate, __half* grad_up,
                         std::int64_t n, cudaStream_t stream) {
  launch_swiglu_backward("swiglu_backward_f32 (f16 gradients)", gate, up, grad_out, grad_gate, grad_up, n, stream);
}

// gate and up in a 16-bit format (mixed precision's kept pre-activations): out and the gradients
// of that format.
void swiglu_forward_f32(const __nv_bfloat16* gate, const __nv_bfloat16* up, __nv_bfloat16* out, std::int64_t n,
                        cudaStream_t stream) {
  launch_swiglu_forward("swiglu_forward_f32 (bf16)", gate, up, out, n, stream);
}

void swiglu_forward_f32(const __half* gate, const __half* up, __half* out, std::int64_t n, cudaStream_t stream) {
  launch_swiglu_forward("swiglu_forward_f32 (f16)", gate, up, out, n, stream);
}

void swiglu_backward_f32(const __nv_bfloat16* gate, const __nv_bfloat16* up, const float* grad_out,
                         __nv_bfloat16* grad_gate, __nv_bfloat16* grad_up, std::int64_t n, cudaStream_t stream) {
  launch_swiglu_backward("swiglu_backward_f32 (bf16)", gate, up, grad_out, grad_gate, grad_up, n, stream);
}

void swiglu_backward_f32(const __half* gate, const __half* up, const float* grad_out, __half* grad_gate,
                         __half* grad_up, std::int64_t n, cudaStream_t stream) {
  launch_swiglu_backward("swiglu_backward_f32 (f16)", gate, up, grad_out, grad_gate, grad_up, n, stream);
}

}  // namespace myriad::cuda
