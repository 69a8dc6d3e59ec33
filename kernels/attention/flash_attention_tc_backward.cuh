// Flash attention backward on tensor cores (16-bit E = bf16 or f16 in and out, f32 accumulation),
// the contract of flash_attention_backward_bf16 (kernels.h): from q, k, v, out, lse and dO it
// writes dQ, dK, dV (or adds into them with `accumulate`). Included by the per-type instance
// files through backward_tc<E>.
//
//   delta_i = dO_i . O_i                                  (attention_delta.cuh, shared with the CUDA-core path)
//   dQ kernel, a block per 64 queries of a head, key tiles of 64 through shared memory (the runs
//     of attention_visibility.cuh: up to the diagonal, or the listed blocks of a layout); per warp
//     (16 queries): S = Q K^T, dP = dO V^T (WMMA into f32 scratch), P = exp(S scale - lse),
//     dS = P (dP - delta) rounded to E, dQ += dS K in register fragments; dQ = scale dQ.
//   dK/dV kernel, a block per 64 keys of a key/value head; over the group's query heads in order
//     and their query tiles (causal: from the first that sees the block's first key; with a
//     layout only those whose layout row lists the block's key block); per row group (16 keys):
//     S^T = K Q^T, dP^T = V dO^T, P^T and dS^T as above (E), dV += P^T dO, dK += dS^T Q in
//     register fragments; dK = scale dK. D is split into D / 64 column parts (DkdvSplit): the
//     block runs 4 * D / 64 warps, warp w takes row group w % 4 and the dK / dV columns
//     [64 (w / 4), 64 (w / 4) + 64), so each warp holds 4 + 4 fragments. The warps of a row group
//     share its scratch and split its 64 query columns between them: each computes S^T, dP^T,
//     P^T and dS^T for its 64 / (D / 64) columns, then (after a block barrier when D > 64) the
//     products over all 64 for its own dK / dV columns.
// Masked entries (causal, outside a listed block, past q_seq / k_seq, or of a query row whose
// lse is -inf: it saw no key) get P = 0. A layout's block_size must be a multiple of 64
// (kFlashAttentionTcLayoutTile). Every sum runs in an order fixed by the shape: bit-identical run
// to run, no atomics.
#pragma once

#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "attention/attention_delta.cuh"
#include "attention/attention_shape.h"
#include "attention/attention_visibility.cuh"
#include "attention/tc_tiles.cuh"
#include "common/shared_memory.h"
#include "common/launch_checks.h"
#include "myriad/cuda/check.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda {
namespace {

namespace wmma = nvcuda::wmma;
using namespace tc;  // kTileRows, kWarps, kThreads, kLog2e, Tiles, load_tile

using Accumulator = wmma::fragment<wmma::accumulator, 16, 16, 16, float>;

// The backward kernels' shared memory: four tiles (the block's own rows of two operands, and the
// streamed tiles of the other two), then per row group of 16 (a warp, or the D / 64 warps of a
// dK/dV row group) two f32 score blocks (S, dP), two 16-bit blocks (P, dS), one f32 16 x D
// staging block for the result, and the streamed rows' lse and delta.
template <int D>
struct BackwardLayout : Tiles<D> {
  using T = Tiles<D>;
  static constexpr int kScoresOffset = 4 * T::kBytes;
  static constexpr int kProbsOffset = kScoresOffset + 2 * T::kScoresBytes;
  static constexpr int kOutOffset = kProbsOffset + 2 * T::kProbsBytes;
  static constexpr int kRowStatsOffset = kOutOffset + T::kOutBytes;
  static constexpr int kBytes = kRowStatsOffset + 2 * kTileRows * 4;
};

// Views of the scratch of BackwardLayout for row group `group` (0 .. kWarps - 1) of 16 rows.
template <typename E, int D>
struct WarpScratch {
  float* s;    // 16 x 64 scores (or their transpose), ld Tiles<D>::kScores
  float* dp;   // 16 x 64
  E* p;        // 16 x 64 probabilities, ld Tiles<D>::kProbs
  E* ds;       // 16 x 64
  float* out;  // 16 x D staging, ld Tiles<D>::kOut
  __device__ WarpScratch(unsigned char* shared, int group) {
    using L = BackwardLayout<D>;
    s = reinterpret_cast<float*>(shared + L::kScoresOffset) + group * 16 * L::kScores;
    dp = reinterpret_cast<float*>(shared + L::kScoresOffset + L::kScoresBytes) + group * 16 * L::kScores;
    p = reinterpret_cast<E*>(shared + L::kProbsOffset) + group * 16 * L::kProbs;
    ds = reinterpret_cast<E*>(shared + L::kProbsOffset + L::kProbsBytes) + group * 16 * L::kProbs;
    out = reinterpret_cast<float*>(shared + L::kOutOffset) + group * 16 * L::kOut;
  }
};

// The dK/dV kernel's split of D into kParts column parts of 64: warp w works on the 16 keys of
// row group w % kWarps and accumulates the dK / dV columns [kColumns (w / kWarps), + kColumns).
template <int D>
struct DkdvSplit {
  static_assert(D % 64 == 0, "D splits into parts of 64 columns");
  static constexpr int kParts = D / 64;
  static constexpr int kColumns = D / kParts;              // dK / dV columns per warp
  static constexpr int kFragments = kColumns / 16;         // accumulator fragments per warp, each of dK and dV
  static constexpr int kGroups = kTileRows / 16 / kParts;  // 16-column groups of S^T / dP^T per warp
  static constexpr int kQueries = kTileRows / kParts;      // P^T / dS^T columns per warp
  static constexpr int kBlockThreads = kWarps * kParts * 32;
  static_assert(kQueries == kGroups * 16, "a warp's P^T / dS^T columns are the S^T / dP^T columns it computes");
};

// Orders a row group's scratch between the kParts warps that share it: a block barrier when there
// are several (callers reach it block-uniformly), else the warp's own.
template <int kParts>
__device__ __forceinline__ void sync_row_group() {
  if constexpr (kParts > 1) {
    __syncthreads();
  } else {
    __syncwarp();
  }
}

// Columns [16 n0, 16 (n0 + kGroups)) of dst (16 x 64, f32, ld kScores) = A_w (16 rows of `a` from
// row a_row, row-major tile) times the transpose of the 64-row tile `b` (each of its rows one
// output column).
template <int D, int kGroups = kTileRows / 16, typename E>
__device__ __forceinline__ void times_transposed(const E* a, int a_row, const E* b, float* dst, int n0 = 0) {
  constexpr int kRow = Tiles<D>::kRow;
#pragma unroll
  for (int i = 0; i < kGroups; ++i) {
    const int n = n0 + i;
    Accumulator acc;
    wmma::fill_fragment(acc, 0.0f);
#pragma unroll
    for (int kk = 0; kk < D; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major> x;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::col_major> yt;
      wmma::load_matrix_sync(x, a + a_row * kRow + kk, kRow);
      wmma::load_matrix_sync(yt, b + n * 16 * kRow + kk, kRow);
      wmma::mma_sync(acc, x, yt, acc);
    }
    wmma::store_matrix_sync(dst + n * 16, acc, Tiles<D>::kScores, wmma::mem_row_major);
  }
}

// acc[d] += lhs (16 x 64 E, ld kProbs) times columns [col0 + 16 d, col0 + 16 d + 16) of the
// 64-row tile `rhs` (64 x D), d < kCount; col0 a multiple of 16.
template <int D, typename E, int kCount>
__device__ __forceinline__ void accumulate_product(Accumulator (&acc)[kCount], const E* lhs, const E* rhs,
                                                   int col0 = 0) {
  static_assert(kCount * 16 <= D, "columns within the tile");
  constexpr int kRow = Tiles<D>::kRow;
#pragma unroll
  for (int d = 0; d < kCount; ++d) {
#pragma unroll
    for (int kk = 0; kk < kTileRows; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major> x;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::row_major> y;
      wmma::load_matrix_sync(x, lhs + kk, Tiles<D>::kProbs);
      wmma::load_matrix_sync(y, rhs + kk * kRow + col0 + d * 16, kRow);
      wmma::mma_sync(acc[d], x, y, acc[d]);
    }
  }
}

// Writes (or with `accumulate` adds) scale * acc (16 x 16 kCount) as E to columns
// [col0, col0 + 16 kCount) of rows [row0, row0 + 16) of a (rows, D) matrix, rows past `rows`
// dropped; through the same columns of the f32 16 x D staging block, which only this warp uses
// there. Lane pairs split the row's columns.
template <int D, typename E, int kCount>
__device__ __forceinline__ void store_rows(Accumulator (&acc)[kCount], float scale, float* staging, E* dst, int row0,
                                           int rows, int lane, bool accumulate, int col0 = 0) {
  static_assert(kCount * 16 <= D, "columns within the row");
  constexpr int kHalf = kCount * 8;  // columns per lane
#pragma unroll
  for (int d = 0; d < kCount; ++d) {
    for (int i = 0; i < acc[d].num_elements; ++i) acc[d].x[i] *= scale;
    wmma::store_matrix_sync(staging + col0 + d * 16, acc[d], Tiles<D>::kOut, wmma::mem_row_major);
  }
  __syncwarp();
  const int r = lane >> 1, half = lane & 1;
  if (row0 + r < rows) {
    E* out_row = dst + static_cast<std::int64_t>(row0 + r) * D;
    for (int c = col0 + half * kHalf; c < col0 + (half + 1) * kHalf; ++c) {
      store_or_add(&out_row[c], staging[r * Tiles<D>::kOut + c], accumulate);
    }
  }
  __syncwarp();
}

template <typename E, int D, bool kCausal>
__global__ void __launch_bounds__(kThreads)
    backward_dq_tc(const E* q, const E* k, const E* v, const E* grad_out, const float* lse, const float* delta,
                   E* grad_q, AttentionGeometry geo, float scale_log2, float scale, bool accumulate) {
  using L = BackwardLayout<D>;
  extern __shared__ __align__(128) unsigned char shared[];
  E* sQ = reinterpret_cast<E*>(shared);
  E* sdO = reinterpret_cast<E*>(shared + Tiles<D>::kBytes);
  E* sK = reinterpret_cast<E*>(shared + 2 * Tiles<D>::kBytes);
  E* sV = reinterpret_cast<E*>(shared + 3 * Tiles<D>::kBytes);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  WarpScratch<E, D> w(shared, warp);

  const int q_heads = geo.q_heads, group = geo.group, q_rows = geo.q_rows, k_rows = geo.k_rows;
  const int q0 = static_cast<int>(blockIdx.x) * kTileRows;
  const int bh = static_cast<int>(blockIdx.y), b = bh / q_heads, h = bh % q_heads;
  const std::int64_t kv_head = static_cast<std::int64_t>(b) * (q_heads / group) + h / group;
  const std::int64_t q_offset = static_cast<std::int64_t>(bh) * q_rows;
  load_tile<D>(q + q_offset * D, q0, q_rows, sQ, tid);
  load_tile<D>(grad_out + q_offset * D, q0, q_rows, sdO, tid);
  const int r = lane >> 1, half = lane & 1;
  const int query = q0 + warp * 16 + r;
  const int position = geo.q_offset + query;
  const float row_lse = query < q_rows ? lse[q_offset + query] : -INFINITY;
  const bool sees_keys = isfinite(row_lse);  // a real row that saw some key
  const float lse2 = sees_keys ? row_lse * kLog2e : 0.0f;
  const float delta_q = query < q_rows ? delta[q_offset + query] : 0.0f;
  Accumulator dq[D / 16];
#pragma unroll
  for (int d = 0; d < D / 16; ++d) wmma::fill_fragment(dq[d], 0.0f);

  const int last_query = min(q_rows, q0 + kTileRows) - 1;
  KeySpans<kCausal> spans(geo, bh, q0, last_query);
  for (int begin = 0, end = 0; spans.next(begin, end);) {
    for (int k0 = begin; k0 < end; k0 += kTileRows) {
      __syncthreads();
      load_tile<D>(k + kv_head * k_rows * D, k0, k_rows, sK, tid);
      load_tile<D>(v + kv_head * k_rows * D, k0, k_rows, sV, tid);
      __syncthreads();
      times_transposed<D>(sQ, warp * 16, sK, w.s);    // S = Q K^T
      times_transposed<D>(sdO, warp * 16, sV, w.dp);  // dP = dO V^T
      __syncwarp();
      for (int c = half * 32; c < half * 32 + 32; ++c) {
        const int key = k0 + c;
        const bool valid = sees_keys && key < end && (!kCausal || geo.k_offset + key <= position);
        const float p = valid ? exp2f(w.s[r * L::kScores + c] * scale_log2 - lse2) : 0.0f;
        store(&w.ds[r * L::kProbs + c], p * (w.dp[r * L::kScores + c] - delta_q));
      }
      __syncwarp();
      accumulate_product<D>(dq, w.ds, sK);  // dQ += dS K
    }
  }
  store_rows<D>(dq, scale, w.out, grad_q + q_offset * D, q0 + warp * 16, q_rows, lane, accumulate);
}

template <typename E, int D, bool kCausal>
__global__ void __launch_bounds__(DkdvSplit<D>::kBlockThreads)
    backward_dkdv_tc(const E* q, const E* k, const E* v, const E* grad_out, const float* lse, const float* delta,
                     E* grad_k, E* grad_v, AttentionGeometry geo, float scale_log2, float scale, bool accumulate) {
  using L = BackwardLayout<D>;
  using Split = DkdvSplit<D>;
  constexpr int kBlockThreads = Split::kBlockThreads;
  extern __shared__ __align__(128) unsigned char shared[];
  E* sK = reinterpret_cast<E*>(shared);
  E* sV = reinterpret_cast<E*>(shared + Tiles<D>::kBytes);
  E* sQ = reinterpret_cast<E*>(shared + 2 * Tiles<D>::kBytes);
  E* sdO = reinterpret_cast<E*>(shared + 3 * Tiles<D>::kBytes);
  float* s_lse = reinterpret_cast<float*>(shared + L::kRowStatsOffset);
  float* s_delta = s_lse + kTileRows;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  // The warp's row group (16 keys) and column part of D; with one part, the warp and 0 as constants.
  const int row_group = Split::kParts > 1 ? warp % kWarps : warp;
  const int part = Split::kParts > 1 ? warp / kWarps : 0;
  WarpScratch<E, D> w(shared, row_group);

  const int q_heads = geo.q_heads, group = geo.group, q_rows = geo.q_rows, k_rows = geo.k_rows;
  const int k0 = static_cast<int>(blockIdx.x) * kTileRows;
  const int kv_heads = q_heads / group;
  const int bg = static_cast<int>(blockIdx.y), b = bg / kv_heads, g = bg % kv_heads;
  const std::int64_t kv_offset = static_cast<std::int64_t>(bg) * k_rows;
  load_tile<D, kBlockThreads>(k + kv_offset * D, k0, k_rows, sK, tid);
  load_tile<D, kBlockThreads>(v + kv_offset * D, k0, k_rows, sV, tid);
  const int r = lane >> 1, half = lane & 1;
  const int key = k0 + row_group * 16 + r;
  const int key_position = geo.k_offset + key;
  const int col0 = part * Split::kColumns;  // this warp's dK / dV columns: [col0, col0 + kColumns)
  // This lane's P^T / dS^T columns (queries of the tile): its half of the part's kQueries.
  const int c_begin = part * Split::kQueries + half * (Split::kQueries / 2);
  const int c_end = c_begin + Split::kQueries / 2;
  Accumulator dk[Split::kFragments], dv[Split::kFragments];
#pragma unroll
  for (int d = 0; d < Split::kFragments; ++d) {
    wmma::fill_fragment(dk[d], 0.0f);
    wmma::fill_fragment(dv[d], 0.0f);
  }

  const int query_begin = first_query_tile<kCausal>(geo, k0, kTileRows);
  for (int hh = 0; hh < group; ++hh) {
    const int bh = b * q_heads + g * group + hh;
    const std::int64_t q_offset = static_cast<std::int64_t>(bh) * q_rows;
    for (int q0 = query_begin; q0 < q_rows; q0 += kTileRows) {
      if (!key_tile_listed(geo, bh, q0, k0)) continue;  // the same answer for the whole block
      __syncthreads();
      load_tile<D, kBlockThreads>(q + q_offset * D, q0, q_rows, sQ, tid);
      load_tile<D, kBlockThreads>(grad_out + q_offset * D, q0, q_rows, sdO, tid);
      for (int i = tid; i < kTileRows; i += kBlockThreads) {
        const bool real = q0 + i < q_rows;
        const float row_lse = real ? lse[q_offset + q0 + i] : -INFINITY;
        s_lse[i] = isfinite(row_lse) ? row_lse * kLog2e : INFINITY;  // INFINITY: no row, or it saw no key
        s_delta[i] = real ? delta[q_offset + q0 + i] : 0.0f;
      }
      __syncthreads();
      // This part's 16-column groups of the row group's S^T = K Q^T and dP^T = V dO^T: the same
      // columns as its P^T / dS^T below, so only this warp's writes need to be visible.
      times_transposed<D, Split::kGroups>(sK, row_group * 16, sQ, w.s, part * Split::kGroups);
      times_transposed<D, Split::kGroups>(sV, row_group * 16, sdO, w.dp, part * Split::kGroups);
      __syncwarp();
      for (int c = c_begin; c < c_end; ++c) {
        const int query = q0 + c;
        const bool valid = key < k_rows && s_lse[c] != INFINITY && (!kCausal || geo.q_offset + query >= key_position);
        const float p = valid ? exp2f(w.s[r * L::kScores + c] * scale_log2 - s_lse[c]) : 0.0f;
        store(&w.p[r * L::kProbs + c], p);
        store(&w.ds[r * L::kProbs + c], p * (w.dp[r * L::kScores + c] - s_delta[c]));
      }
      sync_row_group<Split::kParts>();            // the products read all 64 columns of P^T and dS^T
      accumulate_product<D>(dv, w.p, sdO, col0);  // dV += P^T dO
      accumulate_product<D>(dk, w.ds, sQ, col0);  // dK += dS^T Q
    }
  }
  store_rows<D>(dk, scale, w.out, grad_k + kv_offset * D, k0 + row_group * 16, k_rows, lane, accumulate, col0);
  store_rows<D>(dv, 1.0f, w.out, grad_v + kv_offset * D, k0 + row_group * 16, k_rows, lane, accumulate, col0);
}

template <typename E, int D, bool kCausal>
void launch_backward(const E* q, const E* k, const E* v, const E* out, const float* lse, const E* grad_out, E* grad_q,
                     E* grad_k, E* grad_v, float* delta, const FlashAttentionShape& s, int group, cudaStream_t stream) {
  constexpr int kBytes = BackwardLayout<D>::kBytes;
  detail::check_shared_memory("flash_attention_backward_tc", kBytes,
                              "use the CUDA-core kernels (flash_attention_*_f32 / _bf16), which need far less");
  const std::int64_t rows = s.batch * s.q_heads * s.q_seq;
  launch_delta<E, D>(out, grad_out, delta, rows, stream);
  const float scale = detail::effective_scale(s);
  const AttentionGeometry geo = detail::geometry(s, group);
  const unsigned q_tiles = static_cast<unsigned>(detail::ceil_div(s.q_seq, kTileRows));
  MYRIAD_CUDA_CHECK(
      cudaFuncSetAttribute(backward_dq_tc<E, D, kCausal>, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
  backward_dq_tc<E, D, kCausal>
      <<<dim3(q_tiles, static_cast<unsigned>(s.batch * s.q_heads)), kThreads, kBytes, stream>>>(
          q, k, v, grad_out, lse, delta, grad_q, geo, scale * kLog2e, scale, s.accumulate);
  if (s.key_rows() == 0) return;
  const unsigned k_tiles = static_cast<unsigned>(detail::ceil_div(s.key_rows(), kTileRows));
  MYRIAD_CUDA_CHECK(
      cudaFuncSetAttribute(backward_dkdv_tc<E, D, kCausal>, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
  backward_dkdv_tc<E, D, kCausal>
      <<<dim3(k_tiles, static_cast<unsigned>(s.batch * s.kv_heads)), DkdvSplit<D>::kBlockThreads, kBytes, stream>>>(
          q, k, v, grad_out, lse, delta, grad_k, grad_v, geo, scale * kLog2e, scale, s.accumulate);
}

// The body of flash_attention_backward_tc_<type> (kernels.h) for element type E; `op` names it in errors.
template <typename E>
void backward_tc(const char* op, const E* q, const E* k, const E* v, const E* out, const float* lse, const E* grad_out,
                 E* grad_q, E* grad_k, E* grad_v, float* delta, std::int64_t delta_floats, const FlashAttentionShape& s,
                 cudaStream_t stream) {
  static_assert(kTileRows == kFlashAttentionTcLayoutTile, "a block's rows must lie in one layout block");
  const int group = detail::checked_group(op, s, kTileRows);
  if (s.batch == 0 || s.q_seq == 0) return;
  detail::check_backward_buffers(op, q, k, v, out, lse, grad_out, grad_q, grad_k, grad_v, delta, delta_floats, s,
                                 sizeof(E), 16);  // rows are read in 16-byte chunks
  auto run = [&](auto head_dim, auto causal) {
    launch_backward<E, decltype(head_dim)::value, decltype(causal)::value>(q, k, v, out, lse, grad_out, grad_q, grad_k,
                                                                           grad_v, delta, s, group, stream);
  };
  using D64 = std::integral_constant<int, 64>;
  using D128 = std::integral_constant<int, 128>;
  if (s.head_dim == 64) {
    s.causal ? run(D64{}, std::true_type{}) : run(D64{}, std::false_type{});
  } else {
    s.causal ? run(D128{}, std::true_type{}) : run(D128{}, std::false_type{});
  }
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace
}  // namespace myriad::cuda
