// The vocabulary-parallel loss's per-token pieces (kernels.h, ops/vocab_shard_loss.h), f32:
//   vocab_shard_partials_f32   packed[i] = exp(local_lse[i] - maxima[i]),
//                              packed[n + i] = state[i] == 1 ? local_lse[i] - local_loss[i] : 0
//   vocab_shard_combine_f32    lse[i] = maxima[i] + log(packed[i]),
//                              losses[i] = state[i] == -1 ? 0 : lse[i] - packed[n + i]
//   vocab_shard_tokens_i32     out[i] = the shard's row of token i (or `elsewhere`; ignore_index
//                              kept), or with `state` 1 / 0 / -1 — integer, exact
// Grid-stride loops, one thread per row; no atomics (deterministic). expf / logf differ from the
// host's std::exp / std::log by at most a few ulp (the GPU tests compare with that tolerance).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <utility>

#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kThreads = 256;

__global__ void partials_kernel(const std::int32_t* state, const float* local_lse, const float* local_loss,
                                const float* maxima, float* packed, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    packed[i] = expf(local_lse[i] - maxima[i]);
    packed[n + i] = state[i] == 1 ? local_lse[i] - local_loss[i] : 0.0f;
  }
}

__global__ void combine_kernel(const std::int32_t* state, const float* maxima, const float* packed, float* lse,
                               float* losses, std::int64_t n) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float value = maxima[i] + logf(packed[i]);
    lse[i] = value;
    losses[i] = state[i] == -1 ? 0.0f : value - packed[n + i];
  }
}

__global__ void tokens_kernel(const std::int32_t* tokens, std::int32_t* out, std::int64_t n, std::int64_t vocab_start,
                              std::int64_t rows, bool state, std::int32_t elsewhere, std::int32_t ignore_index) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::int32_t t = tokens[i];
    const std::int64_t row = static_cast<std::int64_t>(t) - vocab_start;
    const bool here = row >= 0 && row < rows;
    if (t == ignore_index) {
      out[i] = state ? -1 : ignore_index;
    } else if (state) {
      out[i] = here ? 1 : 0;
    } else {
      out[i] = here ? static_cast<std::int32_t>(row) : elsewhere;
    }
  }
}

}  // namespace

void vocab_shard_tokens_i32(const std::int32_t* tokens, std::int32_t* out, std::int64_t n, std::int64_t vocab_start,
                            std::int64_t rows, bool state, std::int32_t elsewhere, std::int32_t ignore_index,
                            cudaStream_t stream) {
  const char* op = "vocab_shard_tokens_i32";
  detail::check_count(op, "n", n);
  if (n == 0) return;
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(std::int32_t);
  detail::check_pointer(op, "tokens", tokens, alignof(std::int32_t));
  detail::check_pointer(op, "out", out, alignof(std::int32_t));
  detail::check_disjoint(op, "out", out, bytes, "tokens", tokens, bytes);
  tokens_kernel<<<detail::grid_stride_blocks(op, n, kThreads), kThreads, 0, stream>>>(tokens, out, n, vocab_start, rows,
                                                                                      state, elsewhere, ignore_index);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

void vocab_shard_partials_f32(const std::int32_t* state, const float* local_lse, const float* local_loss,
                              const float* maxima, float* packed, std::int64_t n, cudaStream_t stream) {
  const char* op = "vocab_shard_partials_f32";
  detail::check_count(op, "n", n);
  if (n == 0) return;
  detail::check_pointer(op, "state", state, alignof(std::int32_t));
  for (const auto& [name, input] :
       {std::pair{"local_lse", local_lse}, std::pair{"local_loss", local_loss}, std::pair{"maxima", maxima}}) {
    detail::check_pointer(op, name, input, alignof(float));
    detail::check_disjoint(op, "packed", packed, 2 * static_cast<std::size_t>(n) * sizeof(float), name, input,
                           static_cast<std::size_t>(n) * sizeof(float));
  }
  detail::check_pointer(op, "packed", packed, alignof(float));
  partials_kernel<<<detail::grid_stride_blocks(op, n, kThreads), kThreads, 0, stream>>>(state, local_lse, local_loss,
                                                                                        maxima, packed, n);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

void vocab_shard_combine_f32(const std::int32_t* state, const float* maxima, const float* packed, float* lse,
                             float* losses, std::int64_t n, cudaStream_t stream) {
  const char* op = "vocab_shard_combine_f32";
  detail::check_count(op, "n", n);
  if (n == 0) return;
  detail::check_pointer(op, "state", state, alignof(std::int32_t));
  detail::check_pointer(op, "maxima", maxima, alignof(float));
  detail::check_pointer(op, "packed", packed, alignof(float));
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(float);
  for (const auto& [name, out] : {std::pair{"lse", lse}, std::pair{"losses", losses}}) {
    detail::check_pointer(op, name, out, alignof(float));
    detail::check_disjoint(op, name, out, bytes, "maxima", maxima, bytes);
    detail::check_disjoint(op, name, out, bytes, "packed", packed, 2 * bytes);
  }
  combine_kernel<<<detail::grid_stride_blocks(op, n, kThreads), kThreads, 0, stream>>>(state, maxima, packed, lse,
                                                                                       losses, n);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace myriad::cuda
