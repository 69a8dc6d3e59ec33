// Embedding lookup and its gradient, f32 table (V, C), i32 ids (N) (the op of ops/embedding.h).
//   forward:  out[n, :] = table[ids[n], :]                      one thread per output element
//   backward: grad_table[ids[n], :] += grad_out[n, :]           deterministic, no atomics:
//             thread c of the grid owns column c and walks the tokens n = 0 .. N-1 in order, so
//             every table element is a sum in row-major token order, as on the CPU — bit for bit.
//             (Column-parallel only: C threads; fine for correctness, a sort-based version is
//             the faster follow-up.)
// Ids are validated on the device: an id outside [0, V) writes zeros (forward) or is skipped
// (backward) and lowers *bad_index (device long long, initialise to LLONG_MAX) to its position,
// which the caller checks after synchronising.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kThreads = 256;
constexpr std::int64_t kMaxBlocks = 65536;

__global__ void embedding_forward_kernel(const std::int32_t* ids, const float* table, float* out, std::int64_t tokens,
                                         std::int64_t vocab, std::int64_t channels, long long* bad_index) {
  const std::int64_t total = tokens * channels;
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t e = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < total; e += stride) {
    const std::int64_t n = e / channels, c = e % channels;
    const std::int32_t id = ids[n];
    if (id < 0 || id >= vocab) {
      out[e] = 0.0f;
      if (c == 0) atomicMin(bad_index, static_cast<long long>(n));
    } else {
      out[e] = table[static_cast<std::int64_t>(id) * channels + c];
    }
  }
}

__global__ void embedding_backward_kernel(const std::int32_t* ids, const float* grad_out, float* grad_table,
                                          std::int64_t tokens, std::int64_t vocab, std::int64_t channels,
                                          long long* bad_index) {
  const std::int64_t c = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  for (std::int64_t n = 0; n < tokens; ++n) {
    const std::int32_t id = ids[n];
    if (id < 0 || id >= vocab) {
      if (c == 0) atomicMin(bad_index, static_cast<long long>(n));
      continue;
    }
    grad_table[static_cast<std::int64_t>(id) * channels + c] += grad_out[n * channels + c];
  }
}

void check_sizes(const char* op, std::int64_t tokens, std::int64_t vocab, std::int64_t channels) {
  detail::check_count(op, "tokens", tokens);
  MYRIAD_CHECK(vocab >= 1 && channels >= 1,
               op << ": vocab and channels must be >= 1, got " << vocab << " and " << channels);
}

// Pointer checks of both launchers: ids, the (tokens, C) rows, the (V, C) table, bad_index, and
// that the written one does not overlap the read one.
void check_buffers(const char* op, const std::int32_t* ids, const char* rows_name, const float* rows,
                   const char* table_name, const float* table, bool rows_written, const long long* bad_index,
                   std::int64_t tokens, std::int64_t vocab, std::int64_t channels) {
  detail::check_pointer(op, "ids", ids, alignof(std::int32_t));
  detail::check_pointer(op, rows_name, rows, alignof(float));
  detail::check_pointer(op, table_name, table, alignof(float));
  detail::check_pointer(op, "bad_index", bad_index, alignof(long long));
  const std::size_t row_bytes = static_cast<std::size_t>(tokens * channels) * sizeof(float);
  const std::size_t table_bytes = static_cast<std::size_t>(vocab * channels) * sizeof(float);
  if (rows_written) {
    detail::check_disjoint(op, rows_name, rows, row_bytes, table_name, table, table_bytes);
  } else {
    detail::check_disjoint(op, table_name, table, table_bytes, rows_name, rows, row_bytes);
  }
}

}  // namespace

void embedding_forward_f32(const std::int32_t* ids, const float* table, float* out, long long* bad_index,
                           std::int64_t tokens, std::int64_t vocab, std::int64_t channels, cudaStream_t stream) {
  const char* op = "embedding_forward_f32";
  check_sizes(op, tokens, vocab, channels);
  if (tokens == 0) return;
  check_buffers(op, ids, "out", out, "table", table, true, bad_index, tokens, vocab, channels);
  const auto blocks =
      static_cast<unsigned>(std::min<std::int64_t>(detail::grid_blocks(op, tokens * channels, kThreads), kMaxBlocks));
  embedding_forward_kernel<<<blocks, kThreads, 0, stream>>>(ids, table, out, tokens, vocab, channels, bad_index);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

void embedding_backward_f32(const std::int32_t* ids, const float* grad_out, float* grad_table, long long* bad_index,
                            std::int64_t tokens, std::int64_t vocab, std::int64_t channels, cudaStream_t stream) {
  const char* op = "embedding_backward_f32";
  check_sizes(op, tokens, vocab, channels);
  if (tokens == 0) return;
  check_buffers(op, ids, "grad_out", grad_out, "grad_table", grad_table, false, bad_index, tokens, vocab, channels);
  embedding_backward_kernel<<<detail::grid_blocks(op, channels, kThreads), kThreads, 0, stream>>>(
      ids, grad_out, grad_table, tokens, vocab, channels, bad_index);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace myriad::cuda
