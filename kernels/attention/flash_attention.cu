// Flash attention forward and backward (FlashAttention-2's algorithm), causal or not, with
// grouped-query heads, head dims 64 and 128, f32 or bf16 tensors with f32 math. No T x T matrix
// exists anywhere: the forward keeps a running max m, sum l and output accumulator per query row
// (online softmax) and saves lse = m + log(l); the backward recomputes each probability from
// lse.
//
// Work split (correctness first; no tensor cores yet): a block owns 32 rows (queries in the
// forward and dQ kernels, keys in the dK/dV kernel) with 4 threads per row; thread `lane` of a
// row holds dims lane, lane + 4, ... (interleaved, so the 4 lanes read consecutive shared-memory
// words), and a row's dot product is a 2-step xor shuffle among its 4 lanes. The other operand
// streams through shared memory in tiles of 32 rows, converted to f32 once.
//   forward (per query i):  s_j = scale q_i . k_j,  online softmax over j (j <= i if causal),
//                           out_i = sum_j p_j v_j / l,  lse_i = m + log l
//   delta_i = dO_i . O_i
//   dQ (per query i):       p = exp(s_ij - lse_i), dp = dO_i . v_j, ds = p (dp - delta_i),
//                           dQ_i = scale sum_j ds k_j
//   dK, dV (per key j of kv head g): over the query heads of the group in order and queries
//                           i (>= j if causal): dV_j += p dO_i, dK_j += scale ds q_i
// Every sum runs in an order fixed by the shape: bit-identical run to run, no atomics.
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <utility>

#include "attention/attention_delta.cuh"
#include "attention/attention_shape.h"
#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kRows = 32;   // rows a block owns
constexpr int kLanes = 4;   // threads per row
constexpr int kThreads = kRows * kLanes;
constexpr int kTile = 32;   // rows of the streamed operand per shared-memory tile
constexpr unsigned kFull = 0xffffffffu;


// Sum over the 4 lanes of a row (lanes 4r .. 4r+3 of the warp); every lane gets the total.
__device__ __forceinline__ float row_sum(float x) {
  x += __shfl_xor_sync(kFull, x, 1);
  x += __shfl_xor_sync(kFull, x, 2);
  return x;
}

// The two row dot products of the backward kernels: (x . x_tile_row, y . y_tile_row) over the
// row's lanes, each lane holding dims lane, lane + 4, ...
template <int P>
__device__ __forceinline__ float2 row_dots(const float* x, const float* x_tile_row, const float* y,
                                           const float* y_tile_row, int lane) {
  float sx = 0.0f, sy = 0.0f;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    sx += x[p] * x_tile_row[p * kLanes + lane];
    sy += y[p] * y_tile_row[p * kLanes + lane];
  }
  return make_float2(row_sum(sx), row_sum(sy));
}

template <typename T, int D>
__device__ void load_tile(float (*tile)[D], const T* base, int first, int seq) {
  for (int e = threadIdx.x; e < kTile * D; e += kThreads) {
    const int r = e / D, d = e % D, row = first + r;
    tile[r][d] = row < seq ? to_float(base[static_cast<std::int64_t>(row) * D + d]) : 0.0f;
  }
}

// Where this thread's query row is, for the kernels that own query rows (forward, dQ): block
// (x: row block, y: batch * q_heads), the row's 4 lanes, and the kv head its q head reads.
struct QueryRow {
  int bh, kv, row, lane, i;
  bool valid;
  std::int64_t offset;   // of the row in q / out / grad_out / grad_q
  std::int64_t kv_base;  // of the kv head in k / v
};

template <int D>
__device__ QueryRow query_row(int seq, int q_heads, int group) {
  QueryRow r;
  r.bh = blockIdx.y;
  const int b = r.bh / q_heads, h = r.bh % q_heads;
  r.kv = b * (q_heads / group) + h / group;
  r.row = threadIdx.x / kLanes;
  r.lane = threadIdx.x % kLanes;
  r.i = blockIdx.x * kRows + r.row;
  r.valid = r.i < seq;
  r.offset = (static_cast<std::int64_t>(r.bh) * seq + (r.valid ? r.i : 0)) * D;
  r.kv_base = static_cast<std::int64_t>(r.kv) * seq * D;
  return r;
}

template <typename T, int D, bool kCausal>
__global__ void __launch_bounds__(kThreads) flash_forward(const T* q, const T* k, const T* v, T* out, float* lse,
                                                          int seq, int q_heads, int group, float scale) {
  constexpr int P = D / kLanes;
  __shared__ float ks[kTile][D];
  __shared__ float vs[kTile][D];
  const QueryRow qr = query_row<D>(seq, q_heads, group);
  const int bh = qr.bh, lane = qr.lane, i = qr.i;
  const bool valid = qr.valid;
  const std::int64_t q_row = qr.offset;
  const T* k_base = k + qr.kv_base;
  const T* v_base = v + qr.kv_base;
  float qv[P], acc[P];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    qv[p] = to_float(q[q_row + p * kLanes + lane]) * scale;
    acc[p] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  const int last = min(seq, (blockIdx.x + 1) * kRows) - 1;
  const int key_end = kCausal ? last + 1 : seq;
  for (int j0 = 0; j0 < key_end; j0 += kTile) {
    __syncthreads();
    load_tile<T, D>(ks, k_base, j0, seq);
    load_tile<T, D>(vs, v_base, j0, seq);
    __syncthreads();
    const int tile_end = min(kTile, key_end - j0);
    for (int jj = 0; jj < tile_end; ++jj) {
      float partial = 0.0f;
#pragma unroll
      for (int p = 0; p < P; ++p) partial += qv[p] * ks[jj][p * kLanes + lane];
      const float s = row_sum(partial);
      if (!valid || (kCausal && j0 + jj > i)) continue;
      const float m_new = fmaxf(m, s), correction = expf(m - m_new), pj = expf(s - m_new);
      l = l * correction + pj;
#pragma unroll
      for (int p = 0; p < P; ++p) acc[p] = acc[p] * correction + pj * vs[jj][p * kLanes + lane];
      m = m_new;
    }
  }
  if (!valid) return;
  const float inv = 1.0f / l;
#pragma unroll
  for (int p = 0; p < P; ++p) store(out + q_row + p * kLanes + lane, acc[p] * inv);
  if (lane == 0) lse[static_cast<std::int64_t>(bh) * seq + i] = m + logf(l);
}

template <typename T, int D, bool kCausal>
__global__ void __launch_bounds__(kThreads) flash_backward_dq(const T* q, const T* k, const T* v, const T* grad_out,
                                                              const float* lse, const float* delta, T* grad_q, int seq,
                                                              int q_heads, int group, float scale) {
  constexpr int P = D / kLanes;
  __shared__ float ks[kTile][D];
  __shared__ float vs[kTile][D];
  const QueryRow qr = query_row<D>(seq, q_heads, group);
  const int bh = qr.bh, lane = qr.lane, i = qr.i;
  const bool valid = qr.valid;
  const std::int64_t q_row = qr.offset;
  const T* k_base = k + qr.kv_base;
  const T* v_base = v + qr.kv_base;
  float qv[P], go[P], dq[P];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    qv[p] = to_float(q[q_row + p * kLanes + lane]) * scale;
    go[p] = to_float(grad_out[q_row + p * kLanes + lane]);
    dq[p] = 0.0f;
  }
  const std::int64_t stat = static_cast<std::int64_t>(bh) * seq + (valid ? i : 0);
  const float row_lse = lse[stat], row_delta = delta[stat];
  const int last = min(seq, (blockIdx.x + 1) * kRows) - 1;
  const int key_end = kCausal ? last + 1 : seq;
  for (int j0 = 0; j0 < key_end; j0 += kTile) {
    __syncthreads();
    load_tile<T, D>(ks, k_base, j0, seq);
    load_tile<T, D>(vs, v_base, j0, seq);
    __syncthreads();
    const int tile_end = min(kTile, key_end - j0);
    for (int jj = 0; jj < tile_end; ++jj) {
      const float2 dots = row_dots<P>(qv, ks[jj], go, vs[jj], lane);
      const float s = dots.x, dp = dots.y;
      if (!valid || (kCausal && j0 + jj > i)) continue;
      const float ds = expf(s - row_lse) * (dp - row_delta);
#pragma unroll
      for (int p = 0; p < P; ++p) dq[p] += ds * ks[jj][p * kLanes + lane];
    }
  }
  if (!valid) return;
#pragma unroll
  for (int p = 0; p < P; ++p) store(grad_q + q_row + p * kLanes + lane, dq[p] * scale);
}

template <typename T, int D, bool kCausal>
__global__ void __launch_bounds__(kThreads) flash_backward_dkdv(const T* q, const T* k, const T* v, const T* grad_out,
                                                                const float* lse, const float* delta, T* grad_k,
                                                                T* grad_v, int seq, int q_heads, int group,
                                                                float scale) {
  constexpr int P = D / kLanes;
  __shared__ float qs[kTile][D];
  __shared__ float gos[kTile][D];
  __shared__ float lses[kTile], deltas[kTile];
  const int kv_heads = q_heads / group;
  const int bg = blockIdx.y, b = bg / kv_heads, g = bg % kv_heads;
  const int row = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const int j = blockIdx.x * kRows + row;
  const bool valid = j < seq;
  const std::int64_t k_row = (static_cast<std::int64_t>(bg) * seq + (valid ? j : 0)) * D;
  float kv_k[P], kv_v[P], dk[P], dv[P];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    kv_k[p] = to_float(k[k_row + p * kLanes + lane]) * scale;
    kv_v[p] = to_float(v[k_row + p * kLanes + lane]);
    dk[p] = 0.0f;
    dv[p] = 0.0f;
  }
  const int first_key = blockIdx.x * kRows;
  const int query_begin = kCausal ? first_key / kTile * kTile : 0;
  for (int hh = 0; hh < group; ++hh) {
    const int bh = b * q_heads + g * group + hh;
    const T* q_base = q + static_cast<std::int64_t>(bh) * seq * D;
    const T* go_base = grad_out + static_cast<std::int64_t>(bh) * seq * D;
    for (int i0 = query_begin; i0 < seq; i0 += kTile) {
      __syncthreads();
      load_tile<T, D>(qs, q_base, i0, seq);
      load_tile<T, D>(gos, go_base, i0, seq);
      for (int r = threadIdx.x; r < kTile; r += kThreads) {
        const int i = i0 + r;
        lses[r] = i < seq ? lse[static_cast<std::int64_t>(bh) * seq + i] : 0.0f;
        deltas[r] = i < seq ? delta[static_cast<std::int64_t>(bh) * seq + i] : 0.0f;
      }
      __syncthreads();
      const int tile_end = min(kTile, seq - i0);
      for (int ii = 0; ii < tile_end; ++ii) {
        const float2 dots = row_dots<P>(kv_k, qs[ii], kv_v, gos[ii], lane);
        const float s = dots.x, dp = dots.y;
        if (!valid || (kCausal && i0 + ii < j)) continue;
        const float pij = expf(s - lses[ii]), ds = pij * (dp - deltas[ii]);
#pragma unroll
        for (int p = 0; p < P; ++p) {
          dv[p] += pij * gos[ii][p * kLanes + lane];
          dk[p] += ds * qs[ii][p * kLanes + lane];
        }
      }
    }
  }
  if (!valid) return;
#pragma unroll
  for (int p = 0; p < P; ++p) {
    store(grad_k + k_row + p * kLanes + lane, dk[p] * scale);
    store(grad_v + k_row + p * kLanes + lane, dv[p]);
  }
}

template <typename T, int D, bool kCausal>
void forward_for(const T* q, const T* k, const T* v, T* out, float* lse, const FlashAttentionShape& s, int group,
                 cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(detail::ceil_div(s.seq, kRows)), static_cast<unsigned>(s.batch * s.q_heads));
  flash_forward<T, D, kCausal><<<grid, kThreads, 0, stream>>>(q, k, v, out, lse, static_cast<int>(s.seq),
                                                              static_cast<int>(s.q_heads), group, detail::effective_scale(s));
}

template <typename T, int D, bool kCausal>
void backward_for(const T* q, const T* k, const T* v, const T* out, const float* lse, const T* grad_out, T* grad_q,
                  T* grad_k, T* grad_v, float* delta, const FlashAttentionShape& s, int group, cudaStream_t stream) {
  const std::int64_t rows = s.batch * s.q_heads * s.seq;
  launch_delta<T, D>(out, grad_out, delta, rows, stream);
  const float scale = detail::effective_scale(s);
  const dim3 q_grid(static_cast<unsigned>(detail::ceil_div(s.seq, kRows)), static_cast<unsigned>(s.batch * s.q_heads));
  flash_backward_dq<T, D, kCausal><<<q_grid, kThreads, 0, stream>>>(q, k, v, grad_out, lse, delta, grad_q,
                                                                    static_cast<int>(s.seq), static_cast<int>(s.q_heads),
                                                                    group, scale);
  const dim3 k_grid(static_cast<unsigned>(detail::ceil_div(s.seq, kRows)), static_cast<unsigned>(s.batch * s.kv_heads));
  flash_backward_dkdv<T, D, kCausal><<<k_grid, kThreads, 0, stream>>>(q, k, v, grad_out, lse, delta, grad_k, grad_v,
                                                                      static_cast<int>(s.seq),
                                                                      static_cast<int>(s.q_heads), group, scale);
}

template <typename T>
void forward_dispatch(const char* op, const T* q, const T* k, const T* v, T* out, float* lse,
                      const FlashAttentionShape& s, cudaStream_t stream) {
  const int group = detail::checked_group(op, s);
  if (s.batch == 0 || s.seq == 0) return;
  detail::check_forward_buffers(op, q, k, v, out, lse, s, sizeof(T), alignof(T));
  if (s.head_dim == 64) {
    s.causal ? forward_for<T, 64, true>(q, k, v, out, lse, s, group, stream)
             : forward_for<T, 64, false>(q, k, v, out, lse, s, group, stream);
  } else {
    s.causal ? forward_for<T, 128, true>(q, k, v, out, lse, s, group, stream)
             : forward_for<T, 128, false>(q, k, v, out, lse, s, group, stream);
  }
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

template <typename T>
void backward_dispatch(const char* op, const T* q, const T* k, const T* v, const T* out, const float* lse,
                       const T* grad_out, T* grad_q, T* grad_k, T* grad_v, float* delta, std::int64_t delta_floats,
                       const FlashAttentionShape& s, cudaStream_t stream) {
  const int group = detail::checked_group(op, s);
  if (s.batch == 0 || s.seq == 0) return;
  detail::check_backward_buffers(op, q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, delta, delta_floats, s,
                                 sizeof(T), alignof(T));
  if (s.head_dim == 64) {
    s.causal ? backward_for<T, 64, true>(q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, delta, s, group, stream)
             : backward_for<T, 64, false>(q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, delta, s, group, stream);
  } else {
    s.causal ? backward_for<T, 128, true>(q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, delta, s, group, stream)
             : backward_for<T, 128, false>(q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, delta, s, group,
                                           stream);
  }
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace

void flash_attention_forward_f32(const float* q, const float* k, const float* v, float* out, float* lse,
                                 const FlashAttentionShape& shape, cudaStream_t stream) {
  forward_dispatch("flash_attention_forward_f32", q, k, v, out, lse, shape, stream);
}

void flash_attention_forward_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                  __nv_bfloat16* out, float* lse, const FlashAttentionShape& shape,
                                  cudaStream_t stream) {
  forward_dispatch("flash_attention_forward_bf16", q, k, v, out, lse, shape, stream);
}

void flash_attention_backward_f32(const float* q, const float* k, const float* v, const float* out, const float* lse,
                                  const float* grad_out, float* grad_q, float* grad_k, float* grad_v, float* delta,
                                  std::int64_t delta_floats, const FlashAttentionShape& shape, cudaStream_t stream) {
  backward_dispatch("flash_attention_backward_f32", q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, delta,
                    delta_floats, shape, stream);
}

void flash_attention_backward_bf16(const __nv_bfloat16* q, const __nv_bfloat16* k, const __nv_bfloat16* v,
                                   const __nv_bfloat16* out, const float* lse, const __nv_bfloat16* grad_out,
                                   __nv_bfloat16* grad_q, __nv_bfloat16* grad_k, __nv_bfloat16* grad_v, float* delta,
                                   std::int64_t delta_floats, const FlashAttentionShape& shape, cudaStream_t stream) {
  backward_dispatch("flash_attention_backward_bf16", q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, delta,
                    delta_floats, shape, stream);
}

}  // namespace myriad::cuda
