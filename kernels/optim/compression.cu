// Compression codes with error feedback on the device (ops/compression.h, kernels.h): the CPU
// op's arithmetic operation for operation, so the codes and errors are the CPU's bits.
//
// sign encode: one warp per block of 64 (8 per thread block): y = x + e through shared memory,
//   lane 0 sums |y| in float64 in index order (the CPU's order), the sign bits are two ballots.
// int8 encode: one thread block of 256 per code block: max |y| by a shared-memory tree (max is
//   exact in any order), then q = clamp(rint(y / scale)) per thread.
// top-k encode: one thread block of 1024 per segment, nothing read back by the host:
//   1. e = y = x + e;
//   2. radix select of T, the k-th largest key |y| (f32 bits as u32: their order is |y|'s for
//      non-NaN values), 8 bits per pass (a 256-bin shared histogram per pass), which also gives
//      `greater` (keys > T) and `ties` = k - greater (keys == T to keep);
//   3. in tiles of 1024, in index order: a block-wide count of the keys == T before each element
//      keeps the `ties` lowest-indexed ones, a second count gives each kept element its slot,
//      which receives (index, y); the kept elements' errors become y - y.
//   5 passes over the segment by one SM: correct and free of host waits, not tuned for size.
// Decoding: one thread per element (sign, int8: the block's scale and byte at fixed offsets —
//   every block before the last is full) or per kept pair (top-k: a scatter after a memset;
//   indices are unique within a code, and out-of-range ones are skipped). The CPU decodes into
//   zeros with +=, so the first write is 0 + v (which turns -0 into +0) here too.
// No fused multiply-adds anywhere: the _rn intrinsics round each operation as the CPU does.
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>

#include "common/block_reduce.cuh"
#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kSignBlock = 64;
constexpr int kSignBlockBytes = 4 + kSignBlock / 8;
constexpr int kSignWarpsPerBlock = 8;
constexpr int kInt8Block = 256;
constexpr int kInt8BlockBytes = 4 + kInt8Block;
constexpr int kSelectThreads = 1024;
constexpr int kDecodeThreads = 256;
constexpr unsigned kFullMask = 0xffffffffu;

__device__ void store_u32(std::uint8_t* at, unsigned value) {
  for (int b = 0; b < 4; ++b) at[b] = static_cast<std::uint8_t>(value >> (8 * b));
}
__device__ unsigned load_u32(const std::uint8_t* at) {
  unsigned value = 0;
  for (int b = 0; b < 4; ++b) value |= static_cast<unsigned>(at[b]) << (8 * b);
  return value;
}
__device__ float load_f32(const std::uint8_t* at) { return __uint_as_float(load_u32(at)); }

// The first write of a decode: the CPU adds into zeros.
__device__ float decoded_into(float* out, float value, bool accumulate) {
  return __fadd_rn(accumulate ? *out : 0.0f, value);
}

__global__ void sign_encode_kernel(const float* x, float* e, std::uint8_t* code, std::int64_t n) {
  __shared__ float ys[kSignWarpsPerBlock][kSignBlock];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const std::int64_t blocks = (n + kSignBlock - 1) / kSignBlock;
  for (std::int64_t block = static_cast<std::int64_t>(blockIdx.x) * kSignWarpsPerBlock + warp; block < blocks;
       block += static_cast<std::int64_t>(gridDim.x) * kSignWarpsPerBlock) {
    const std::int64_t begin = block * kSignBlock;
    const int b = static_cast<int>(n - begin < kSignBlock ? n - begin : kSignBlock);
    const bool has0 = lane < b, has1 = lane + 32 < b;
    const float y0 = has0 ? __fadd_rn(x[begin + lane], e[begin + lane]) : 0.0f;
    const float y1 = has1 ? __fadd_rn(x[begin + lane + 32], e[begin + lane + 32]) : 0.0f;
    ys[warp][lane] = y0;
    ys[warp][lane + 32] = y1;
    __syncwarp();
    float scale = 0.0f;
    if (lane == 0) {
      double mass = 0.0;
      for (int i = 0; i < b; ++i) mass += static_cast<double>(fabsf(ys[warp][i]));
      scale = static_cast<float>(mass / static_cast<double>(b));
    }
    scale = __shfl_sync(kFullMask, scale, 0);
    const bool negative0 = has0 && y0 < 0.0f, negative1 = has1 && y1 < 0.0f;
    const unsigned bits0 = __ballot_sync(kFullMask, negative0), bits1 = __ballot_sync(kFullMask, negative1);
    std::uint8_t* out = code + block * kSignBlockBytes;
    if (lane == 0) store_u32(out, __float_as_uint(scale));
    if (lane < (b + 7) / 8) out[4 + lane] = static_cast<std::uint8_t>((lane < 4 ? bits0 : bits1) >> (8 * (lane % 4)));
    if (has0) e[begin + lane] = __fsub_rn(y0, negative0 ? -scale : scale);
    if (has1) e[begin + lane + 32] = __fsub_rn(y1, negative1 ? -scale : scale);
    __syncwarp();  // ys is rewritten by the next block of this warp
  }
}

__global__ void int8_encode_kernel(const float* x, float* e, std::uint8_t* code, std::int64_t n) {
  __shared__ float shared[kInt8Block];
  const std::int64_t blocks = (n + kInt8Block - 1) / kInt8Block;
  for (std::int64_t block = blockIdx.x; block < blocks; block += gridDim.x) {
    const std::int64_t i = block * kInt8Block + threadIdx.x;
    const bool has = i < n;
    const float y = has ? __fadd_rn(x[i], e[i]) : 0.0f;
    const float largest = detail::block_reduce<kInt8Block>(has ? fabsf(y) : 0.0f, shared, detail::Max{});
    const float scale = __fdiv_rn(largest, 127.0f);
    std::uint8_t* out = code + block * kInt8BlockBytes;
    if (threadIdx.x == 0) store_u32(out, __float_as_uint(scale));
    if (has) {
      const float level = scale > 0.0f ? rintf(__fdiv_rn(y, scale)) : 0.0f;
      const float clamped = level < -127.0f ? -127.0f : (127.0f < level ? 127.0f : level);
      const auto q = static_cast<std::int8_t>(clamped);
      out[4 + threadIdx.x] = static_cast<std::uint8_t>(q);
      e[i] = __fsub_rn(y, __fmul_rn(static_cast<float>(q), scale));
    }
  }
}

__device__ unsigned magnitude_key(float y) { return __float_as_uint(fabsf(y)); }

// The number of threads before this one (in thread order) whose flag is set, and in `total` the
// block's count. Every thread of the block calls it; `warp_counts` holds 32 values.
__device__ unsigned count_before(bool flag, unsigned* warp_counts, unsigned& total) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const unsigned mask = __ballot_sync(kFullMask, flag);
  if (lane == 0) warp_counts[warp] = __popc(mask);
  __syncthreads();
  unsigned before = 0, all = 0;
  for (int w = 0; w < static_cast<int>(blockDim.x / 32); ++w) {
    const unsigned count = warp_counts[w];
    if (w < warp) before += count;
    all += count;
  }
  __syncthreads();  // warp_counts is rewritten by the next call
  total = all;
  return before + __popc(mask & ((1u << lane) - 1u));
}

__global__ void topk_encode_kernel(const float* x, float* e, std::uint8_t* code, std::int64_t n, std::int64_t k) {
  __shared__ unsigned histogram[256];
  __shared__ unsigned warp_counts[32];
  __shared__ unsigned prefix, remaining;
  for (std::int64_t i = threadIdx.x; i < n; i += kSelectThreads) e[i] = __fadd_rn(x[i], e[i]);
  if (threadIdx.x == 0) {
    prefix = 0;
    remaining = static_cast<unsigned>(k);
  }
  __syncthreads();
  unsigned prefix_mask = 0;
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < 256; b += kSelectThreads) histogram[b] = 0;
    __syncthreads();
    const unsigned want = prefix;
    for (std::int64_t i = threadIdx.x; i < n; i += kSelectThreads) {
      const unsigned key = magnitude_key(e[i]);
      if ((key & prefix_mask) == want) atomicAdd(&histogram[(key >> shift) & 255u], 1u);
    }
    __syncthreads();
    if (threadIdx.x == 0) {  // the digit of the remaining-th largest key among those matching
      unsigned above = 0;
      int digit = 255;
      for (; digit > 0 && above + histogram[digit] < remaining; --digit) above += histogram[digit];
      remaining -= above;
      prefix |= static_cast<unsigned>(digit) << shift;
    }
    prefix_mask |= 255u << shift;
    __syncthreads();
  }
  const unsigned threshold = prefix, ties = remaining;  // keep every key > threshold and `ties` keys == it
  unsigned ties_before = 0, kept_before = 0;
  for (std::int64_t tile = 0; tile < n; tile += kSelectThreads) {
    const std::int64_t i = tile + threadIdx.x;
    const bool has = i < n;
    const float y = has ? e[i] : 0.0f;
    const unsigned key = magnitude_key(y);
    unsigned tile_ties = 0, tile_kept = 0;
    const unsigned tie_rank = ties_before + count_before(has && key == threshold, warp_counts, tile_ties);
    const bool kept = has && (key > threshold || (key == threshold && tie_rank < ties));
    const unsigned slot = kept_before + count_before(kept, warp_counts, tile_kept);
    if (kept) {
      store_u32(code + 4 * static_cast<std::int64_t>(slot), static_cast<unsigned>(i));
      store_u32(code + 4 * (k + slot), __float_as_uint(y));
      e[i] = __fsub_rn(y, y);
    }
    ties_before += tile_ties;
    kept_before += tile_kept;
  }
}

__global__ void sign_decode_kernel(const std::uint8_t* code, float* out, std::int64_t n, bool accumulate) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::uint8_t* block = code + (i / kSignBlock) * kSignBlockBytes;
    const float scale = load_f32(block);
    const int within = static_cast<int>(i % kSignBlock);
    const bool negative = (block[4 + within / 8] >> (within % 8)) & 1u;
    out[i] = decoded_into(out + i, negative ? -scale : scale, accumulate);
  }
}

__global__ void int8_decode_kernel(const std::uint8_t* code, float* out, std::int64_t n, bool accumulate) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t i = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const std::uint8_t* block = code + (i / kInt8Block) * kInt8BlockBytes;
    const auto q = static_cast<std::int8_t>(block[4 + i % kInt8Block]);
    out[i] = decoded_into(out + i, __fmul_rn(static_cast<float>(q), load_f32(block)), accumulate);
  }
}

__global__ void topk_decode_kernel(const std::uint8_t* code, float* out, std::int64_t n, std::int64_t k) {
  const std::int64_t stride = static_cast<std::int64_t>(gridDim.x) * blockDim.x;
  for (std::int64_t j = static_cast<std::int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; j < k; j += stride) {
    const auto index = static_cast<std::int32_t>(load_u32(code + 4 * j));
    if (index < 0 || index >= n) continue;  // not the encoder's code: skipped (ops/compression.h)
    out[index] = __fadd_rn(out[index], load_f32(code + 4 * (k + j)));
  }
}

void check_encode(const char* op, const float* x, float* error, const std::uint8_t* code, std::int64_t n) {
  detail::check_pointer(op, "x", x, alignof(float));
  detail::check_pointer(op, "error", error, alignof(float));
  detail::check_pointer(op, "code", code, 1);
  const auto bytes = static_cast<std::size_t>(n) * sizeof(float);
  detail::check_disjoint(op, "error", error, bytes, "x", x, bytes);
}

void check_decode(const char* op, const std::uint8_t* code, const float* out) {
  detail::check_pointer(op, "code", code, 1);
  detail::check_pointer(op, "out", out, alignof(float));
}

}  // namespace

void sign_encode_f32(const float* x, float* error, std::uint8_t* code, std::int64_t n, cudaStream_t stream) {
  const char* op = "sign_encode_f32";
  detail::check_count(op, "n", n);
  if (n == 0) return;
  check_encode(op, x, error, code, n);
  const unsigned grid = detail::grid_stride_blocks(op, n, kSignBlock * kSignWarpsPerBlock);
  sign_encode_kernel<<<grid, 32 * kSignWarpsPerBlock, 0, stream>>>(x, error, code, n);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

void int8_encode_f32(const float* x, float* error, std::uint8_t* code, std::int64_t n, cudaStream_t stream) {
  const char* op = "int8_encode_f32";
  detail::check_count(op, "n", n);
  if (n == 0) return;
  check_encode(op, x, error, code, n);
  int8_encode_kernel<<<detail::grid_stride_blocks(op, n, kInt8Block), kInt8Block, 0, stream>>>(x, error, code, n);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

void topk_encode_f32(const float* x, float* error, std::uint8_t* code, std::int64_t n, std::int64_t k,
                     cudaStream_t stream) {
  const char* op = "topk_encode_f32";
  detail::check_count(op, "n", n);
  MYRIAD_CHECK(n <= INT32_MAX, op << ": a segment of " << n << " elements has indices beyond int32");
  MYRIAD_CHECK((n == 0 && k == 0) || (k >= 1 && k <= n), op << ": k " << k << " outside [1, n = " << n << "]");
  if (n == 0) return;
  check_encode(op, x, error, code, n);
  topk_encode_kernel<<<1, kSelectThreads, 0, stream>>>(x, error, code, n, k);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

void sign_decode_f32(const std::uint8_t* code, float* out, std::int64_t n, bool accumulate, cudaStream_t stream) {
  const char* op = "sign_decode_f32";
  detail::check_count(op, "n", n);
  if (n == 0) return;
  check_decode(op, code, out);
  sign_decode_kernel<<<detail::grid_stride_blocks(op, n, kDecodeThreads), kDecodeThreads, 0, stream>>>(code, out, n,
                                                                                                       accumulate);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

void int8_decode_f32(const std::uint8_t* code, float* out, std::int64_t n, bool accumulate, cudaStream_t stream) {
  const char* op = "int8_decode_f32";
  detail::check_count(op, "n", n);
  if (n == 0) return;
  check_decode(op, code, out);
  int8_decode_kernel<<<detail::grid_stride_blocks(op, n, kDecodeThreads), kDecodeThreads, 0, stream>>>(code, out, n,
                                                                                                       accumulate);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

void topk_decode_f32(const std::uint8_t* code, float* out, std::int64_t n, std::int64_t k, bool accumulate,
                     cudaStream_t stream) {
  const char* op = "topk_decode_f32";
  detail::check_count(op, "n", n);
  MYRIAD_CHECK((n == 0 && k == 0) || (k >= 1 && k <= n), op << ": k " << k << " outside [1, n = " << n << "]");
  if (n == 0) return;
  check_decode(op, code, out);
  if (!accumulate) MYRIAD_CUDA_CHECK(cudaMemsetAsync(out, 0, static_cast<std::size_t>(n) * sizeof(float), stream));
  topk_decode_kernel<<<detail::grid_stride_blocks(op, k, kDecodeThreads), kDecodeThreads, 0, stream>>>(code, out, n, k);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace myriad::cuda
