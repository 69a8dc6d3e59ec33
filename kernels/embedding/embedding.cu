// Embedding lookup and its gradient, f32 table (V, C), i32 ids (N) (the op of ops/embedding.h).
//   forward:  out[n, :] = table[ids[n], :]                      one thread per output element
//   backward: grad_table[ids[n], :] += grad_out[n, :]           deterministic, no float atomics,
//             parallel over tokens, in three steps on the caller's scratch:
//             1. keys: key[n] = ids[n] (V, sorted last, for an id outside [0, V)), value[n] = n;
//             2. cub::DeviceRadixSort::SortPairs over the bits of V (2 passes at V ~ 50k): stable,
//                so the tokens of one id stay in increasing order;
//             3. one block per (sorted position, column block): a position that starts a run of
//                one id finds the run's end by binary search, and each thread (a column, or 4
//                when C % 4 == 0 and the rows are 16-byte aligned) adds the run's grad_out rows
//                onto grad_table[id] in token order. Every table element is thus a sum in token
//                order starting from its old value, as on the CPU — bit for bit.
// Ids are validated on the device: an id outside [0, V) writes zeros (forward) or is skipped
// (backward) and lowers *bad_index (device long long, initialise to LLONG_MAX) to its position,
// which the caller checks after synchronising.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cub/device/device_radix_sort.cuh>
#include <limits>

#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kThreads = 256;

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

// ---- backward: keys, stable radix sort, one pass over the runs of equal ids ---------------------

constexpr int kRunThreads = 64;               // columns (or float4 columns) per block of the run kernel
constexpr int kRunUnroll = 8;                 // grad_out rows loaded ahead of their (in-order) additions
constexpr unsigned kMaxColumnBlocks = 65535;  // grid.y limit; more columns loop
constexpr std::size_t kScratchAlignment = 256;

// The sort key of a token: its id, or `sentinel` (> every valid id, sorted last) for an id
// outside [0, V). An id is an int32, so sentinel = min(V, 2^31) fits an unsigned key.
unsigned sentinel_key(std::int64_t vocab) { return static_cast<unsigned>(std::min<std::int64_t>(vocab, 1LL << 31)); }

// Bits of the keys to sort: the fewest with sentinel < 2^bits (16 for V = 50304).
int key_bits(unsigned sentinel) {
  int bits = 0;
  while (bits < 32 && (sentinel >> bits) != 0) ++bits;
  return bits;
}

// The scratch of the backward, in this order: keys (2 buffers), token positions (2 buffers),
// CUB's temporary storage; each part starts at a multiple of kScratchAlignment bytes.
struct SortScratch {
  std::size_t buffer_bytes = 0;  // one keys or positions buffer, rounded up
  std::size_t cub_bytes = 0;
  std::size_t total() const { return 4 * buffer_bytes + cub_bytes; }
};

void check_sort_sizes(const char* op, std::int64_t tokens, std::int64_t vocab) {
  detail::check_count(op, "tokens", tokens);
  MYRIAD_CHECK(vocab >= 1, op << ": vocab must be >= 1, got " << vocab);
  MYRIAD_CHECK(tokens <= std::numeric_limits<std::int32_t>::max(),
               op << ": tokens must be < 2^31 (token positions are sorted as int32), got " << tokens);
}

// Sizes for tokens >= 1 (checked by check_sort_sizes). Asks CUB on the current device.
SortScratch sort_scratch(std::int64_t tokens, std::int64_t vocab) {
  SortScratch scratch;
  const std::size_t bytes = static_cast<std::size_t>(tokens) * sizeof(std::uint32_t);
  scratch.buffer_bytes = (bytes + kScratchAlignment - 1) / kScratchAlignment * kScratchAlignment;
  cub::DoubleBuffer<unsigned> keys(nullptr, nullptr);
  cub::DoubleBuffer<std::int32_t> positions(nullptr, nullptr);
  MYRIAD_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, scratch.cub_bytes, keys, positions,
                                                    static_cast<int>(tokens), 0, key_bits(sentinel_key(vocab))));
  return scratch;
}

__global__ void embedding_backward_keys_kernel(const std::int32_t* __restrict__ ids, unsigned* __restrict__ keys,
                                               std::int32_t* __restrict__ positions, std::int64_t tokens,
                                               std::int64_t vocab, unsigned sentinel, long long* bad_index) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t n = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; n < tokens; n += stride) {
    const std::int32_t id = ids[n];
    const bool valid = id >= 0 && id < vocab;
    keys[n] = valid ? static_cast<unsigned>(id) : sentinel;
    positions[n] = static_cast<std::int32_t>(n);
    if (!valid) atomicMin(bad_index, static_cast<long long>(n));
  }
}

__device__ __forceinline__ void add_into(float& acc, float g) { acc += g; }
__device__ __forceinline__ void add_into(float4& acc, const float4& g) {
  acc.x += g.x;
  acc.y += g.y;
  acc.z += g.z;
  acc.w += g.w;
}

// Block (i, y): nothing unless sorted position i starts a run of a valid id; else the run is
// [i, end) and thread column `col` (in Vec units of `columns` per row) sums
// grad_table[id, col] + grad_out[positions[i], col] + ... + grad_out[positions[end - 1], col]
// left to right: positions increase along the run (stable sort), so this is token order.
template <typename Vec>
__global__ void __launch_bounds__(kRunThreads)
    embedding_backward_runs_kernel(const unsigned* __restrict__ keys, const std::int32_t* __restrict__ positions,
                                   const Vec* __restrict__ grad_out, Vec* __restrict__ grad_table, std::int64_t tokens,
                                   unsigned sentinel, std::int64_t columns) {
  const std::int64_t i = blockIdx.x;
  const unsigned key = keys[i];
  if (key == sentinel || (i > 0 && keys[i - 1] == key)) return;
  std::int64_t lo = i + 1, hi = tokens;  // the run's end: the first position past i with another key
  while (lo < hi) {
    const std::int64_t mid = lo + (hi - lo) / 2;
    if (keys[mid] == key) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  const std::int64_t end = lo;
  Vec* row = grad_table + static_cast<std::int64_t>(key) * columns;
  const std::int64_t step = static_cast<std::int64_t>(gridDim.y) * blockDim.x;
  for (std::int64_t col = static_cast<std::int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; col < columns;
       col += step) {
    Vec acc = row[col];
    std::int64_t j = i;
    for (; j + kRunUnroll <= end; j += kRunUnroll) {
      Vec g[kRunUnroll];
#pragma unroll
      for (int u = 0; u < kRunUnroll; ++u) g[u] = grad_out[static_cast<std::int64_t>(positions[j + u]) * columns + col];
#pragma unroll
      for (int u = 0; u < kRunUnroll; ++u) add_into(acc, g[u]);
    }
    for (; j < end; ++j) add_into(acc, grad_out[static_cast<std::int64_t>(positions[j]) * columns + col]);
    row[col] = acc;
  }
}

template <typename Vec>
void launch_runs(const char* op, const unsigned* keys, const std::int32_t* positions, const float* grad_out,
                 float* grad_table, std::int64_t tokens, unsigned sentinel, std::int64_t columns, cudaStream_t stream) {
  const std::int64_t column_blocks =
      std::min<std::int64_t>(detail::grid_blocks(op, columns, kRunThreads), kMaxColumnBlocks);
  const dim3 grid(static_cast<unsigned>(tokens), static_cast<unsigned>(column_blocks));
  embedding_backward_runs_kernel<Vec>
      <<<grid, kRunThreads, 0, stream>>>(keys, positions, reinterpret_cast<const Vec*>(grad_out),
                                         reinterpret_cast<Vec*>(grad_table), tokens, sentinel, columns);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
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
  const auto blocks = detail::grid_stride_blocks(op, tokens * channels, kThreads);
  embedding_forward_kernel<<<blocks, kThreads, 0, stream>>>(ids, table, out, tokens, vocab, channels, bad_index);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

std::int64_t embedding_backward_scratch_bytes(std::int64_t tokens, std::int64_t vocab) {
  check_sort_sizes("embedding_backward_scratch_bytes", tokens, vocab);
  if (tokens == 0) return 0;
  return static_cast<std::int64_t>(sort_scratch(tokens, vocab).total());
}

void embedding_backward_f32(const std::int32_t* ids, const float* grad_out, float* grad_table, long long* bad_index,
                            void* scratch, std::int64_t scratch_bytes, std::int64_t tokens, std::int64_t vocab,
                            std::int64_t channels, cudaStream_t stream) {
  const char* op = "embedding_backward_f32";
  check_sizes(op, tokens, vocab, channels);
  check_sort_sizes(op, tokens, vocab);
  if (tokens == 0) return;
  check_buffers(op, ids, "grad_out", grad_out, "grad_table", grad_table, false, bad_index, tokens, vocab, channels);
  const SortScratch parts = sort_scratch(tokens, vocab);
  detail::check_pointer(op, "scratch", scratch, 16);
  MYRIAD_CHECK(scratch_bytes >= 0 && static_cast<std::size_t>(scratch_bytes) >= parts.total(),
               op << ": scratch holds " << scratch_bytes << " bytes, (N, V) = (" << tokens << ", " << vocab
                  << ") needs " << parts.total() << " (embedding_backward_scratch_bytes)");
  const std::size_t row_bytes = static_cast<std::size_t>(tokens * channels) * sizeof(float);
  const std::size_t table_bytes = static_cast<std::size_t>(vocab * channels) * sizeof(float);
  detail::check_disjoint(op, "scratch", scratch, parts.total(), "grad_table", grad_table, table_bytes);
  detail::check_disjoint(op, "scratch", scratch, parts.total(), "grad_out", grad_out, row_bytes);
  detail::check_disjoint(op, "scratch", scratch, parts.total(), "ids", ids,
                         static_cast<std::size_t>(tokens) * sizeof(std::int32_t));

  char* base = static_cast<char*>(scratch);
  auto* keys_a = reinterpret_cast<unsigned*>(base);
  auto* keys_b = reinterpret_cast<unsigned*>(base + parts.buffer_bytes);
  auto* positions_a = reinterpret_cast<std::int32_t*>(base + 2 * parts.buffer_bytes);
  auto* positions_b = reinterpret_cast<std::int32_t*>(base + 3 * parts.buffer_bytes);
  void* cub_storage = base + 4 * parts.buffer_bytes;
  const unsigned sentinel = sentinel_key(vocab);

  const auto key_blocks = detail::grid_stride_blocks(op, tokens, kThreads);
  embedding_backward_keys_kernel<<<key_blocks, kThreads, 0, stream>>>(ids, keys_a, positions_a, tokens, vocab, sentinel,
                                                                      bad_index);
  MYRIAD_CUDA_CHECK(cudaGetLastError());

  // Sorts (key, position) pairs by key, stably; the sorted pairs end in the buffers that
  // Current() names afterwards (CUB flips the selectors on the host, one per pass).
  cub::DoubleBuffer<unsigned> keys(keys_a, keys_b);
  cub::DoubleBuffer<std::int32_t> positions(positions_a, positions_b);
  std::size_t cub_bytes = parts.cub_bytes;
  MYRIAD_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(cub_storage, cub_bytes, keys, positions, static_cast<int>(tokens),
                                                    0, key_bits(sentinel), stream));

  const bool packets = channels % 4 == 0 && detail::is_aligned(grad_out, alignof(float4)) &&
                       detail::is_aligned(grad_table, alignof(float4));
  if (packets) {
    launch_runs<float4>(op, keys.Current(), positions.Current(), grad_out, grad_table, tokens, sentinel, channels / 4,
                        stream);
  } else {
    launch_runs<float>(op, keys.Current(), positions.Current(), grad_out, grad_table, tokens, sentinel, channels,
                       stream);
  }
}

}  // namespace myriad::cuda
