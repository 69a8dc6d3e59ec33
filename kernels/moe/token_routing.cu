// Token routing of a mixture of experts, f32 rows of C values, i32 indices (the ops of
// ops/token_routing.h; launchers declared in cuda/kernels.h).
//   gather:           out[r, :] = x[source[r], :] (zeros for -1)      one thread per output element
//   combine forward:  out[t, :] = sum_j w[t, j] rows[slot[t, j], :]   one block per token; each
//                     thread owns columns c and adds the K slots in increasing j (no atomics)
//   combine backward: grad_rows zeroed, then grad_rows[slot[t, j], :] = w[t, j] grad_out[t, :]
//                     by the block of token t (each row belongs to at most one (t, j): no
//                     atomics); grad_weight[t, j] = <grad_out[t, :], rows[slot[t, j], :]> by a
//                     fixed-order block reduction (block_reduce), 0 for an unused slot
// Every result depends on the sizes only: bit-identical run to run. An index outside its range
// is treated as -1 and lowers *bad_index (device long long, initialise to LLONG_MAX) to its flat
// position, which the caller reads after synchronising. A row named twice in slot is the
// caller's error (not checked here; the CPU op checks it).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/block_reduce.cuh"
#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kThreads = 256;       // gather: threads per block
constexpr int kTokenThreads = 128;  // combine: threads of a token's block
constexpr std::int64_t kMaxBlocks = 65536;

__global__ void gather_rows_kernel(const float* x, const std::int32_t* source, float* out, std::int64_t rows,
                                   std::int64_t tokens, std::int64_t channels, long long* bad_index) {
  const std::int64_t total = rows * channels;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::int64_t r = e / channels, c = e % channels;
    const std::int32_t s = source[r];
    if (s < 0 || s >= tokens) {
      out[e] = 0.0f;
      if (s != -1 && c == 0) atomicMin(bad_index, static_cast<long long>(r));
    } else {
      out[e] = x[static_cast<std::int64_t>(s) * channels + c];
    }
  }
}

// slot[t, j] if it names a row in [0, rows); -1 otherwise (flagging an index other than -1).
__device__ std::int64_t checked_slot(const std::int32_t* slot, std::int64_t flat, std::int64_t rows,
                                     long long* bad_index) {
  const std::int32_t s = slot[flat];
  if (s >= 0 && s < rows) return s;
  if (s != -1 && threadIdx.x == 0) atomicMin(bad_index, static_cast<long long>(flat));
  return -1;
}

__global__ void combine_rows_forward_kernel(const float* rows, const std::int32_t* slot, const float* weight,
                                            float* out, std::int64_t tokens, std::int64_t k, std::int64_t row_count,
                                            std::int64_t channels, long long* bad_index) {
  for (std::int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    for (std::int64_t c = threadIdx.x; c < channels; c += kTokenThreads) {
      float sum = 0.0f;
      for (std::int64_t j = 0; j < k; ++j) {
        const std::int64_t s = checked_slot(slot, t * k + j, row_count, bad_index);
        if (s < 0) continue;
        const float w = weight == nullptr ? 1.0f : weight[t * k + j];
        sum += w * rows[s * channels + c];
      }
      out[t * channels + c] = sum;
    }
  }
}

__global__ void combine_rows_backward_kernel(const float* rows, const std::int32_t* slot, const float* weight,
                                             const float* grad_out, float* grad_rows, float* grad_weight,
                                             std::int64_t tokens, std::int64_t k, std::int64_t row_count,
                                             std::int64_t channels, long long* bad_index) {
  __shared__ float shared[kTokenThreads];
  for (std::int64_t t = blockIdx.x; t < tokens; t += gridDim.x) {
    const float* g = grad_out + t * channels;
    for (std::int64_t j = 0; j < k; ++j) {
      const std::int64_t s = checked_slot(slot, t * k + j, row_count, bad_index);  // uniform over the block
      if (s < 0) {
        if (grad_weight != nullptr && threadIdx.x == 0) grad_weight[t * k + j] = 0.0f;
        continue;
      }
      const float w = weight == nullptr ? 1.0f : weight[t * k + j];
      float* gr = grad_rows + s * channels;
      const float* row = rows == nullptr ? nullptr : rows + s * channels;
      float partial = 0.0f;
      for (std::int64_t c = threadIdx.x; c < channels; c += kTokenThreads) {
        gr[c] = w * g[c];
        if (grad_weight != nullptr) partial += g[c] * row[c];
      }
      if (grad_weight == nullptr) continue;
      const float dot = detail::block_reduce<kTokenThreads>(partial, shared, detail::Add{});
      if (threadIdx.x == 0) grad_weight[t * k + j] = dot;
    }
  }
}

void check_sizes(const char* op, std::int64_t tokens, std::int64_t k, std::int64_t rows, std::int64_t channels) {
  detail::check_count(op, "tokens", tokens);
  detail::check_count(op, "k", k);
  detail::check_count(op, "rows", rows);
  detail::check_count(op, "channels", channels);
}

std::size_t float_bytes(std::int64_t n) { return static_cast<std::size_t>(n) * sizeof(float); }

unsigned token_blocks(std::int64_t tokens) { return static_cast<unsigned>(std::min(tokens, kMaxBlocks)); }

}  // namespace

void gather_rows_f32(const float* x, const std::int32_t* source, float* out, long long* bad_index, std::int64_t rows,
                     std::int64_t tokens, std::int64_t channels, cudaStream_t stream) {
  const char* op = "gather_rows_f32";
  check_sizes(op, tokens, 1, rows, channels);
  if (rows == 0 || channels == 0) return;
  detail::check_pointer(op, "source", source, alignof(std::int32_t));
  detail::check_pointer(op, "out", out, alignof(float));
  detail::check_pointer(op, "bad_index", bad_index, alignof(long long));
  if (tokens > 0) {
    detail::check_pointer(op, "x", x, alignof(float));
    detail::check_disjoint(op, "out", out, float_bytes(rows * channels), "x", x, float_bytes(tokens * channels));
  }
  const auto blocks = detail::grid_stride_blocks(op, rows * channels, kThreads);
  gather_rows_kernel<<<blocks, kThreads, 0, stream>>>(x, source, out, rows, tokens, channels, bad_index);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

void combine_rows_forward_f32(const float* rows, const std::int32_t* slot, const float* weight, float* out,
                              long long* bad_index, std::int64_t tokens, std::int64_t k, std::int64_t row_count,
                              std::int64_t channels, cudaStream_t stream) {
  const char* op = "combine_rows_forward_f32";
  check_sizes(op, tokens, k, row_count, channels);
  if (tokens == 0 || channels == 0) return;
  detail::check_pointer(op, "out", out, alignof(float));
  detail::check_pointer(op, "bad_index", bad_index, alignof(long long));
  if (k > 0) {
    detail::check_pointer(op, "slot", slot, alignof(std::int32_t));
    detail::check_optional_pointer(op, "weight", weight, alignof(float));
  }
  if (row_count > 0) {
    detail::check_pointer(op, "rows", rows, alignof(float));
    detail::check_disjoint(op, "out", out, float_bytes(tokens * channels), "rows", rows,
                           float_bytes(row_count * channels));
  }
  combine_rows_forward_kernel<<<token_blocks(tokens), kTokenThreads, 0, stream>>>(rows, slot, weight, out, tokens, k,
                                                                                  row_count, channels, bad_index);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

void combine_rows_backward_f32(const float* rows, const std::int32_t* slot, const float* weight, const float* grad_out,
                               float* grad_rows, float* grad_weight, long long* bad_index, std::int64_t tokens,
                               std::int64_t k, std::int64_t row_count, std::int64_t channels, cudaStream_t stream) {
  const char* op = "combine_rows_backward_f32";
  check_sizes(op, tokens, k, row_count, channels);
  if (row_count > 0 && channels > 0) {
    detail::check_pointer(op, "grad_rows", grad_rows, alignof(float));
    MYRIAD_CUDA_CHECK(cudaMemsetAsync(grad_rows, 0, float_bytes(row_count * channels), stream));
  }
  if (tokens == 0 || k == 0) return;
  detail::check_pointer(op, "slot", slot, alignof(std::int32_t));
  detail::check_pointer(op, "bad_index", bad_index, alignof(long long));
  detail::check_optional_pointer(op, "weight", weight, alignof(float));
  detail::check_optional_pointer(op, "grad_weight", grad_weight, alignof(float));
  if (channels > 0) {
    detail::check_pointer(op, "grad_out", grad_out, alignof(float));
    if (grad_weight != nullptr && row_count > 0) detail::check_pointer(op, "rows", rows, alignof(float));
    if (row_count > 0) {
      detail::check_disjoint(op, "grad_rows", grad_rows, float_bytes(row_count * channels), "grad_out", grad_out,
                             float_bytes(tokens * channels));
    }
  }
  combine_rows_backward_kernel<<<token_blocks(tokens), kTokenThreads, 0, stream>>>(
      rows, slot, weight, grad_out, grad_rows, grad_weight, tokens, k, row_count, channels, bad_index);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace myriad::cuda
