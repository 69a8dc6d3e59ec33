// Flash attention forward and backward (FlashAttention-2's algorithm), causal or not, with
// grouped-query heads, head dims 64 and 128, f32 or bf16 tensors with f32 math; q and k/v may
// have different row counts and global offsets, and a block-sparse layout restricts the keys
// (kernels.h, ops/attention.h). No T x T matrix exists anywhere: the forward keeps a running max
// m, sum l and output accumulator per query row (online softmax) and saves lse = m + log(l); the
// backward recomputes each probability from lse.
//
// Work split (correctness first; no tensor cores yet): a block owns 32 rows (queries in the
// forward and dQ kernels, keys in the dK/dV kernel) with 4 threads per row; thread `lane` of a
// row holds dims lane, lane + 4, ... (interleaved, so the 4 lanes read consecutive shared-memory
// words), and a row's dot product is a 2-step xor shuffle among its 4 lanes. The other operand
// streams through shared memory in tiles of 32 rows, converted to f32 once. Which tiles are
// visited is attention_visibility.cuh's: the forward and dQ kernels walk the key runs their query
// tile may see (up to the diagonal when causal; the listed blocks with a layout), the dK/dV kernel
// the query tiles from its first causal one whose layout row lists its key block (so a layout's
// block_size must be a multiple of 32: kFlashAttentionLayoutTile).
//   forward (per query i):  s_j = scale q_i . k_j,  online softmax over the visible j,
//                           out_i = sum_j p_j v_j / l,  lse_i = m + log l
//                           (no visible key: out_i = 0, lse_i = -inf)
//   delta_i = dO_i . O_i
//   dQ (per query i):       p = exp(s_ij - lse_i), dp = dO_i . v_j, ds = p (dp - delta_i),
//                           dQ_i = scale sum_j ds k_j   (lse_i = -inf: p = 0)
//   dK, dV (per key j of kv head g): over the query heads of the group in order and the queries
//                           i that see j: dV_j += p dO_i, dK_j += scale ds q_i
// The gradients are written, or added into with `accumulate` (one thread owns each element).
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
#include "attention/attention_visibility.cuh"
#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

constexpr int kRows = 32;  // rows a block owns
constexpr int kLanes = 4;  // threads per row
constexpr int kThreads = kRows * kLanes;
constexpr int kTile = 32;  // rows of the streamed operand per shared-memory tile
constexpr unsigned kFull = 0xffffffffu;
static_assert(kRows == kFlashAttentionLayoutTile && kTile == kRows, "a tile must lie inside one layout block");

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

// Rows [first, first + kTile) of a (rows, D) matrix into a tile; rows past `rows` are zero.
template <typename T, int D>
__device__ void load_tile(float (*tile)[D], const T* base, int first, int rows) {
  for (int e = threadIdx.x; e < kTile * D; e += kThreads) {
    const int r = e / D, d = e % D, row = first + r;
    tile[r][d] = row < rows ? to_float(base[static_cast<std::int64_t>(row) * D + d]) : 0.0f;
  }
}

// Where this thread's query row is, for the kernels that own query rows (forward, dQ): block
// (x: row block, y: batch * q_heads), the row's 4 lanes, and the kv head its q head reads.
struct QueryRow {
  int bh, kv, row, lane, i, first, last;  // first, last: the block's query rows
  bool valid;
  std::int64_t offset;   // of the row in q / out / grad_out / grad_q
  std::int64_t kv_base;  // of the kv head in k / v
};

template <int D>
__device__ QueryRow query_row(const AttentionGeometry& geo) {
  QueryRow r;
  r.bh = blockIdx.y;
  const int b = r.bh / geo.q_heads, h = r.bh % geo.q_heads;
  r.kv = b * (geo.q_heads / geo.group) + h / geo.group;
  r.row = threadIdx.x / kLanes;
  r.lane = threadIdx.x % kLanes;
  r.first = blockIdx.x * kRows;
  r.last = min(geo.q_rows, r.first + kRows) - 1;
  r.i = r.first + r.row;
  r.valid = r.i < geo.q_rows;
  r.offset = (static_cast<std::int64_t>(r.bh) * geo.q_rows + (r.valid ? r.i : 0)) * D;
  r.kv_base = static_cast<std::int64_t>(r.kv) * geo.k_rows * D;
  return r;
}

template <typename T, int D, bool kCausal>
__global__ void __launch_bounds__(kThreads)
    flash_forward(const T* q, const T* k, const T* v, T* out, float* lse, AttentionGeometry geo, float scale) {
  constexpr int P = D / kLanes;
  __shared__ float ks[kTile][D];
  __shared__ float vs[kTile][D];
  const QueryRow qr = query_row<D>(geo);
  const int lane = qr.lane;
  const bool valid = qr.valid;
  const int position = geo.q_offset + qr.i;  // global position of this query
  const T* k_base = k + qr.kv_base;
  const T* v_base = v + qr.kv_base;
  float qv[P], acc[P];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    qv[p] = to_float(q[qr.offset + p * kLanes + lane]) * scale;
    acc[p] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  KeySpans<kCausal> spans(geo, qr.bh, qr.first, qr.last);
  for (int begin = 0, end = 0; spans.next(begin, end);) {
    for (int j0 = begin; j0 < end; j0 += kTile) {
      __syncthreads();
      load_tile<T, D>(ks, k_base, j0, geo.k_rows);
      load_tile<T, D>(vs, v_base, j0, geo.k_rows);
      __syncthreads();
      const int tile_end = min(kTile, end - j0);
      for (int jj = 0; jj < tile_end; ++jj) {
        float partial = 0.0f;
#pragma unroll
        for (int p = 0; p < P; ++p) partial += qv[p] * ks[jj][p * kLanes + lane];
        const float s = row_sum(partial);
        if (!valid || (kCausal && geo.k_offset + j0 + jj > position)) continue;
        const float m_new = fmaxf(m, s), correction = expf(m - m_new), pj = expf(s - m_new);
        l = l * correction + pj;
#pragma unroll
        for (int p = 0; p < P; ++p) acc[p] = acc[p] * correction + pj * vs[jj][p * kLanes + lane];
        m = m_new;
      }
    }
  }
  if (!valid) return;
  const float inv = l > 0.0f ? 1.0f / l : 0.0f;  // a row that saw no key: zeros
#pragma unroll
  for (int p = 0; p < P; ++p) store(out + qr.offset + p * kLanes + lane, acc[p] * inv);
  if (lane == 0) lse[static_cast<std::int64_t>(qr.bh) * geo.q_rows + qr.i] = l > 0.0f ? m + logf(l) : -INFINITY;
}

template <typename T, int D, bool kCausal>
__global__ void __launch_bounds__(kThreads)
    flash_backward_dq(const T* q, const T* k, const T* v, const T* grad_out, const float* lse, const float* delta,
                      T* grad_q, AttentionGeometry geo, float scale, bool accumulate) {
  constexpr int P = D / kLanes;
  __shared__ float ks[kTile][D];
  __shared__ float vs[kTile][D];
  const QueryRow qr = query_row<D>(geo);
  const int lane = qr.lane;
  const bool valid = qr.valid;
  const int position = geo.q_offset + qr.i;
  const T* k_base = k + qr.kv_base;
  const T* v_base = v + qr.kv_base;
  float qv[P], go[P], dq[P];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    qv[p] = to_float(q[qr.offset + p * kLanes + lane]) * scale;
    go[p] = to_float(grad_out[qr.offset + p * kLanes + lane]);
    dq[p] = 0.0f;
  }
  const std::int64_t stat = static_cast<std::int64_t>(qr.bh) * geo.q_rows + (valid ? qr.i : 0);
  const float row_lse = lse[stat], row_delta = delta[stat];
  const bool sees_keys = valid && isfinite(row_lse);  // -inf: the row saw no key at all
  KeySpans<kCausal> spans(geo, qr.bh, qr.first, qr.last);
  for (int begin = 0, end = 0; spans.next(begin, end);) {
    for (int j0 = begin; j0 < end; j0 += kTile) {
      __syncthreads();
      load_tile<T, D>(ks, k_base, j0, geo.k_rows);
      load_tile<T, D>(vs, v_base, j0, geo.k_rows);
      __syncthreads();
      const int tile_end = min(kTile, end - j0);
      for (int jj = 0; jj < tile_end; ++jj) {
        const float2 dots = row_dots<P>(qv, ks[jj], go, vs[jj], lane);
        const float s = dots.x, dp = dots.y;
        if (!sees_keys || (kCausal && geo.k_offset + j0 + jj > position)) continue;
        const float ds = expf(s - row_lse) * (dp - row_delta);
#pragma unroll
        for (int p = 0; p < P; ++p) dq[p] += ds * ks[jj][p * kLanes + lane];
      }
    }
  }
  if (!valid) return;
#pragma unroll
  for (int p = 0; p < P; ++p) store_or_add(grad_q + qr.offset + p * kLanes + lane, dq[p] * scale, accumulate);
}

template <typename T, int D, bool kCausal>
__global__ void __launch_bounds__(kThreads)
    flash_backward_dkdv(const T* q, const T* k, const T* v, const T* grad_out, const float* lse, const float* delta,
                        T* grad_k, T* grad_v, AttentionGeometry geo, float scale, bool accumulate) {
  constexpr int P = D / kLanes;
  __shared__ float qs[kTile][D];
  __shared__ float gos[kTile][D];
  __shared__ float lses[kTile], deltas[kTile];
  const int q_heads = geo.q_heads, group = geo.group, kv_heads = q_heads / group;
  const int bg = blockIdx.y, b = bg / kv_heads, g = bg % kv_heads;
  const int row = threadIdx.x / kLanes, lane = threadIdx.x % kLanes;
  const int first_key = blockIdx.x * kRows;
  const int j = first_key + row;
  const bool valid = j < geo.k_rows;
  const int key_position = geo.k_offset + j;
  const std::int64_t k_row = (static_cast<std::int64_t>(bg) * geo.k_rows + (valid ? j : 0)) * D;
  float kv_k[P], kv_v[P], dk[P], dv[P];
#pragma unroll
  for (int p = 0; p < P; ++p) {
    kv_k[p] = to_float(k[k_row + p * kLanes + lane]) * scale;
    kv_v[p] = to_float(v[k_row + p * kLanes + lane]);
    dk[p] = 0.0f;
    dv[p] = 0.0f;
  }
  const int query_begin = first_query_tile<kCausal>(geo, first_key, kTile);
  for (int hh = 0; hh < group; ++hh) {
    const int bh = b * q_heads + g * group + hh;
    const std::int64_t stats = static_cast<std::int64_t>(bh) * geo.q_rows;
    const T* q_base = q + stats * D;
    const T* go_base = grad_out + stats * D;
    for (int i0 = query_begin; i0 < geo.q_rows; i0 += kTile) {
      if (!key_tile_listed(geo, bh, i0, first_key)) continue;  // the same answer for the whole block
      __syncthreads();
      load_tile<T, D>(qs, q_base, i0, geo.q_rows);
      load_tile<T, D>(gos, go_base, i0, geo.q_rows);
      for (int r = threadIdx.x; r < kTile; r += kThreads) {
        const int i = i0 + r;
        const float row_lse = i < geo.q_rows ? lse[stats + i] : INFINITY;
        lses[r] = isfinite(row_lse) ? row_lse : INFINITY;  // INFINITY: past q, or a row that saw no key
        deltas[r] = i < geo.q_rows ? delta[stats + i] : 0.0f;
      }
      __syncthreads();
      const int tile_end = min(kTile, geo.q_rows - i0);
      for (int ii = 0; ii < tile_end; ++ii) {
        const float2 dots = row_dots<P>(kv_k, qs[ii], kv_v, gos[ii], lane);
        const float s = dots.x, dp = dots.y;
        if (!valid || lses[ii] == INFINITY || (kCausal && geo.q_offset + i0 + ii < key_position)) continue;
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
    store_or_add(grad_k + k_row + p * kLanes + lane, dk[p] * scale, accumulate);
    store_or_add(grad_v + k_row + p * kLanes + lane, dv[p], accumulate);
  }
}

template <typename T, int D, bool kCausal>
void forward_for(const T* q, const T* k, const T* v, T* out, float* lse, const FlashAttentionShape& s, int group,
                 cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(detail::ceil_div(s.q_seq, kRows)), static_cast<unsigned>(s.batch * s.q_heads));
  flash_forward<T, D, kCausal>
      <<<grid, kThreads, 0, stream>>>(q, k, v, out, lse, detail::geometry(s, group), detail::effective_scale(s));
}

template <typename T, int D, bool kCausal>
void backward_for(const T* q, const T* k, const T* v, const T* out, const float* lse, const T* grad_out, T* grad_q,
                  T* grad_k, T* grad_v, float* delta, const FlashAttentionShape& s, int group, cudaStream_t stream) {
  const std::int64_t rows = s.batch * s.q_heads * s.q_seq;
  launch_delta<T, D>(out, grad_out, delta, rows, stream);
  const float scale = detail::effective_scale(s);
  const AttentionGeometry geo = detail::geometry(s, group);
  const dim3 q_grid(static_cast<unsigned>(detail::ceil_div(s.q_seq, kRows)),
                    static_cast<unsigned>(s.batch * s.q_heads));
  flash_backward_dq<T, D, kCausal>
      <<<q_grid, kThreads, 0, stream>>>(q, k, v, grad_out, lse, delta, grad_q, geo, scale, s.accumulate);
  if (s.key_rows() == 0) return;
  const dim3 k_grid(static_cast<unsigned>(detail::ceil_div(s.key_rows(), kRows)),
                    static_cast<unsigned>(s.batch * s.kv_heads));
  flash_backward_dkdv<T, D, kCausal>
      <<<k_grid, kThreads, 0, stream>>>(q, k, v, grad_out, lse, delta, grad_k, grad_v, geo, scale, s.accumulate);
}

template <typename T>
void forward_dispatch(const char* op, const T* q, const T* k, const T* v, T* out, float* lse,
                      const FlashAttentionShape& s, cudaStream_t stream) {
  const int group = detail::checked_group(op, s, kRows);
  if (s.batch == 0 || s.q_seq == 0) return;
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
  const int group = detail::checked_group(op, s, kRows);
  if (s.batch == 0 || s.q_seq == 0) return;
  detail::check_backward_buffers(op, q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, delta, delta_floats, s,
                                 sizeof(T), alignof(T));
  if (s.head_dim == 64) {
    s.causal ? backward_for<T, 64, true>(q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, delta, s, group, stream)
             : backward_for<T, 64, false>(q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, delta, s, group, stream);
  } else {
    s.causal
        ? backward_for<T, 128, true>(q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, delta, s, group, stream)
        : backward_for<T, 128, false>(q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, delta, s, group, stream);
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
