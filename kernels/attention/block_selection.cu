// Block selection of block-sparse attention on the device (kernels.h, ops/block_selection.h),
// the same steps in the same order as the CPU reference, no atomics:
//   1. means_kernel   one thread per (b, h, block, d): float64 sum of the block's rows in row
//                     order, divided and rounded once (bit-identical to the CPU means)
//   2. select_kernel  one block per layout row (grid-stride): f32 scores scale * qbar . kbar in
//                     d order into shared memory as float64 weights, softmax with a serial sum in
//                     block order, then the kept blocks by repeated block-wide arg-max (equal
//                     weights to the lower block, NaN lowest and never kept), written ascending
//                     and padded with query_blocks; row_begin[r] = r capacity
//   3. totals_kernel  one thread: the wanted rows' counts and, in row order, their mass, added
//                     to totals (deterministic; a few microseconds per thousand rows)
// Invariant: a row's capacity (ops: selection_capacity) bounds what it keeps, so the layout's
// size is known on the host and nothing is read back.
#include <cuda_runtime.h>

#include <climits>
#include <cmath>
#include <cstdint>

#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kThreads = 128;

__global__ void means_kernel(const float* x, float* out, std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t D,
                             std::int64_t sb, std::int64_t sh, std::int64_t st, std::int64_t block_size) {
  const std::int64_t nb = (T + block_size - 1) / block_size, total = B * H * nb * D;
  for (std::int64_t i = blockIdx.x * static_cast<std::int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<std::int64_t>(gridDim.x) * blockDim.x) {
    const std::int64_t d = i % D, n = i / D, blk = n % nb, h = n / nb % H, b = n / (nb * H);
    const std::int64_t t0 = blk * block_size, t1 = t0 + block_size < T ? t0 + block_size : T;
    const float* base = x + b * sb + h * sh + d;
    double sum = 0.0;
    for (std::int64_t t = t0; t < t1; ++t) sum += static_cast<double>(base[t * st]);
    out[i] = static_cast<float>(sum / static_cast<double>(t1 - t0));
  }
}

__device__ bool wanted(const BlockSelectShape& s, std::int64_t qb) {
  if (s.chunk_blocks <= 0) return true;
  const std::int64_t chunk = qb / s.chunk_blocks;
  return chunk == s.chunk0 || chunk == s.chunk1;
}

__device__ bool in_fixed(const BlockSelectShape& s, std::int64_t qb, std::int64_t kb) {
  if (kb > qb) return false;
  if (qb - kb <= s.local_blocks) return true;
  if (kb < s.global_blocks) return true;
  return s.stride_blocks > 0 && (qb - kb) % s.stride_blocks == 0;
}

// a heavier than b: larger weight, equal weights the lower block, NaN lowest; kb < 0: none.
__device__ bool heavier(double wa, int a, double wb, int b) {
  if (b < 0) return a >= 0;
  if (a < 0) return false;
  if (isnan(wa) || isnan(wb)) return !isnan(wa) || (isnan(wb) && a < b);
  return wa > wb || (wa == wb && a < b);
}

// std::max's rule (a NaN value never replaces the running maximum).
__device__ double running_max(double top, double x) { return top < x ? x : top; }

__global__ void select_kernel(BlockSelectShape s, const float* qbar, const float* kbar, std::int32_t* keys,
                              std::int64_t* row_begin, std::int32_t* counts, double* mass) {
  extern __shared__ double w[];  // (nb) weights, then nb flags
  const std::int64_t nb = s.query_blocks, cap = s.capacity, D = s.head_dim;
  unsigned char* flag = reinterpret_cast<unsigned char*>(w + nb);
  __shared__ double red_w[kThreads];
  __shared__ int red_k[kThreads];
  __shared__ double kept_mass, heaviest, top;
  __shared__ int stop;
  const std::int64_t rows = s.batch * s.q_heads * nb, group = s.q_heads / s.kv_heads;
  for (std::int64_t r = blockIdx.x; r < rows; r += gridDim.x) {
    const std::int64_t qb = r % nb, set = r / nb, b = set / s.q_heads, h = set % s.q_heads;
    std::int32_t* row = keys + r * cap;
    if (threadIdx.x == 0) {
      row_begin[r] = r * cap;
      if (r == rows - 1) row_begin[rows] = rows * cap;
    }
    for (std::int64_t j = threadIdx.x; j < cap; j += blockDim.x) row[j] = static_cast<std::int32_t>(nb);
    if (!wanted(s, qb) || qb == 0) {
      __syncthreads();
      if (threadIdx.x == 0) {
        const bool first = wanted(s, qb);
        if (first) row[0] = 0;
        counts[r] = first ? 1 : 0;
        mass[r] = 0.0;
      }
      __syncthreads();
      continue;
    }
    // Weights w[kb] = scale q . k + log(rows of kb), kb < qb.
    const float* q = qbar + ((b * s.q_heads + h) * nb + qb - 1) * D;
    const float* kbase = kbar + (b * s.kv_heads + h / group) * nb * D;
    double local_top = -INFINITY;
    for (std::int64_t kb = threadIdx.x; kb < qb; kb += blockDim.x) {
      const float* k = kbase + kb * D;
      float dot = 0.0f;
      for (std::int64_t d = 0; d < D; ++d) dot = fmaf(q[d], k[d], dot);
      const std::int64_t end =
          kb * s.block_size + s.block_size < s.seq_len ? kb * s.block_size + s.block_size : s.seq_len;
      const double x = static_cast<double>(s.scale * dot) + log(static_cast<double>(end - kb * s.block_size));
      w[kb] = x;
      local_top = running_max(local_top, x);
    }
    red_w[threadIdx.x] = local_top;
    __syncthreads();
    if (threadIdx.x == 0) {
      double t = -INFINITY;
      for (int i = 0; i < kThreads; ++i) t = running_max(t, red_w[i]);
      top = t;
    }
    __syncthreads();
    for (std::int64_t kb = threadIdx.x; kb < qb; kb += blockDim.x) w[kb] = exp(w[kb] - top);
    __syncthreads();
    if (threadIdx.x == 0) {  // the softmax's sum, serial in block order as on the CPU
      double total = 0.0;
      for (std::int64_t kb = 0; kb < qb; ++kb) total += w[kb];
      red_w[0] = total;
    }
    __syncthreads();
    const double total = red_w[0];
    __syncthreads();
    double local_heavy = 0.0;
    for (std::int64_t kb = threadIdx.x; kb <= qb; kb += blockDim.x) {
      if (kb < qb) local_heavy = running_max(local_heavy, w[kb] /= total);
      flag[kb] = in_fixed(s, qb, kb) ? 1 : 0;
    }
    red_w[threadIdx.x] = local_heavy;
    __syncthreads();
    if (threadIdx.x == 0) {
      double heavy = 0.0;
      for (int i = 0; i < kThreads; ++i) heavy = running_max(heavy, red_w[i]);
      heaviest = heavy;
      double m = 0.0;
      std::int64_t candidates = 0;
      for (std::int64_t kb = 0; kb <= qb; ++kb) {
        if (flag[kb] != 0) {
          if (kb < qb) m += w[kb];
        } else {
          ++candidates;
        }
      }
      kept_mass = m;
      red_k[0] = static_cast<int>(s.max_blocks > 0 && s.max_blocks < candidates ? s.max_blocks : candidates);
    }
    __syncthreads();
    const int picks = red_k[0];
    __syncthreads();
    for (int n = 0; n < picks; ++n) {
      double best_w = 0.0;
      int best = -1;
      for (std::int64_t kb = threadIdx.x; kb < qb; kb += blockDim.x) {
        if (flag[kb] == 0 && heavier(w[kb], static_cast<int>(kb), best_w, best)) {
          best_w = w[kb];
          best = static_cast<int>(kb);
        }
      }
      red_w[threadIdx.x] = best_w;
      red_k[threadIdx.x] = best;
      __syncthreads();
      for (int half = kThreads / 2; half > 0; half /= 2) {
        if (threadIdx.x < half &&
            heavier(red_w[threadIdx.x + half], red_k[threadIdx.x + half], red_w[threadIdx.x], red_k[threadIdx.x])) {
          red_w[threadIdx.x] = red_w[threadIdx.x + half];
          red_k[threadIdx.x] = red_k[threadIdx.x + half];
        }
        __syncthreads();
      }
      if (threadIdx.x == 0) {
        const double weight = red_w[0];
        const int kb = red_k[0];
        stop = kb < 0 || isnan(weight) || kept_mass >= s.sparse_ratio || weight < s.threshold * heaviest;
        if (!stop) {
          flag[kb] = 2;
          kept_mass += weight;
        }
      }
      __syncthreads();
      if (stop) break;
    }
    if (threadIdx.x == 0) {
      std::int64_t n = 0;
      for (std::int64_t kb = 0; kb <= qb; ++kb) {
        if (flag[kb] != 0) row[n++] = static_cast<std::int32_t>(kb);
      }
      counts[r] = static_cast<std::int32_t>(n);
      mass[r] = kept_mass;
    }
    __syncthreads();
  }
}

__global__ void totals_kernel(BlockSelectShape s, const std::int32_t* counts, const double* mass, double* totals) {
  const std::int64_t nb = s.query_blocks, rows = s.batch * s.q_heads * nb;
  std::int64_t wanted_rows = 0, kept = 0, causal = 0, selecting = 0;
  double m = 0.0;
  for (std::int64_t r = 0; r < rows; ++r) {
    const std::int64_t qb = r % nb;
    if (wanted(s, qb)) {
      ++wanted_rows;
      kept += counts[r];
      causal += qb + 1;
      if (qb > 0) ++selecting;
    }
  }
  for (std::int64_t r = 0; r < rows; ++r) m += mass[r];
  totals[0] += static_cast<double>(wanted_rows);
  totals[1] += static_cast<double>(kept);
  totals[2] += static_cast<double>(causal);
  totals[3] += static_cast<double>(selecting);
  totals[4] += m;
}

}  // namespace

void block_means_f32(const float* x, float* out, std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t D,
                     std::int64_t stride_b, std::int64_t stride_h, std::int64_t stride_t, std::int64_t block_size,
                     cudaStream_t stream) {
  const char* op = "block_means_f32";
  for (auto [name, v] : {std::pair<const char*, std::int64_t>{"B", B}, {"H", H}, {"T", T}, {"D", D}}) {
    detail::check_count(op, name, v);
  }
  MYRIAD_CHECK(block_size >= 1, op << ": block_size " << block_size << " must be positive");
  const std::int64_t total = B * H * ((T + block_size - 1) / block_size) * D;
  if (total == 0) return;
  detail::check_pointer(op, "x", x, alignof(float));
  detail::check_pointer(op, "out", out, alignof(float));
  means_kernel<<<detail::grid_stride_blocks(op, total, 256), 256, 0, stream>>>(x, out, B, H, T, D, stride_b, stride_h,
                                                                               stride_t, block_size);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

void select_blocks_f32(const BlockSelectShape& s, const float* qbar, const float* kbar, std::int32_t* key_blocks,
                       std::int64_t* row_begin, std::int32_t* counts, double* mass, double* totals,
                       cudaStream_t stream) {
  const char* op = "select_blocks_f32";
  MYRIAD_CHECK(s.batch >= 0 && s.q_heads >= 1 && s.kv_heads >= 1 && s.q_heads % s.kv_heads == 0 &&
                   s.query_blocks >= 0 && s.query_blocks < INT_MAX && s.head_dim >= 1 && s.capacity >= 1 &&
                   s.block_size >= 1,
               op << ": bad shape (batch " << s.batch << ", q_heads " << s.q_heads << ", kv_heads " << s.kv_heads
                  << ", query_blocks " << s.query_blocks << ", head_dim " << s.head_dim << ", capacity " << s.capacity
                  << ", block_size " << s.block_size << ")");
  detail::check_pointer(op, "row_begin", row_begin, alignof(std::int64_t));
  const std::int64_t rows = s.batch * s.q_heads * s.query_blocks;
  if (rows == 0) {
    MYRIAD_CUDA_CHECK(cudaMemsetAsync(row_begin, 0, sizeof(std::int64_t), stream));
    return;
  }
  for (auto [name, ptr] : {std::pair<const char*, const void*>{"qbar", qbar}, {"kbar", kbar}}) {
    detail::check_pointer(op, name, ptr, alignof(float));
  }
  detail::check_pointer(op, "key_blocks", key_blocks, alignof(std::int32_t));
  detail::check_pointer(op, "counts", counts, alignof(std::int32_t));
  detail::check_pointer(op, "mass", mass, alignof(double));
  detail::check_optional_pointer(op, "totals", totals, alignof(double));
  const std::size_t smem = static_cast<std::size_t>(s.query_blocks) * (sizeof(double) + 1);
  int device = 0, limit = 0;
  MYRIAD_CUDA_CHECK(cudaGetDevice(&device));
  MYRIAD_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  MYRIAD_CHECK(smem + 4096 <= static_cast<std::size_t>(limit),
               op << ": " << s.query_blocks << " query blocks need " << smem
                  << " bytes of shared memory per block, more than the device's " << limit
                  << " (use a larger block_size)");
  if (smem > 48 * 1024) {
    MYRIAD_CUDA_CHECK(
        cudaFuncSetAttribute(select_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)));
  }
  const auto blocks = static_cast<unsigned>(rows < 65535 ? rows : 65535);
  select_kernel<<<blocks, kThreads, smem, stream>>>(s, qbar, kbar, key_blocks, row_begin, counts, mass);
  MYRIAD_CUDA_CHECK(cudaGetLastError());
  if (totals != nullptr) {
    totals_kernel<<<1, 1, 0, stream>>>(s, counts, mass, totals);
    MYRIAD_CUDA_CHECK(cudaGetLastError());
  }
}

}  // namespace myriad::cuda
