// Flash attention backward on tensor cores (16-bit E = bf16 or f16 in and out, f32 accumulation),
// the contract of flash_attention_backward_bf16 (kernels.h): from q, k, v, out, lse and dO it
// writes dQ, dK, dV. Included by the per-type instance files through backward_tc<E>.
//
//   delta_i = dO_i . O_i                                  (attention_delta.cuh, shared with the CUDA-core path)
//   dQ kernel, a block per 64 queries of a head, key tiles of 64 through shared memory; per warp
//     (16 queries): S = Q K^T, dP = dO V^T (WMMA into f32 scratch), P = exp(S scale - lse),
//     dS = P (dP - delta) rounded to E, dQ += dS K in register fragments; dQ = scale dQ.
//   dK/dV kernel, a block per 64 keys of a key/value head; over the group's query heads in order
//     and their query tiles (causal: from the block's first key); per warp (16 keys):
//     S^T = K Q^T, dP^T = V dO^T, P^T and dS^T as above (E), dV += P^T dO, dK += dS^T Q in
//     register fragments; dK = scale dK.
// Masked entries (causal, or past `seq`) get P = 0. Every sum runs in an order fixed by the
// shape: bit-identical run to run, no atomics.
#pragma once

#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>
#include <tuple>
#include <type_traits>
#include <utility>

#include "attention/attention_delta.cuh"
#include "attention/attention_shape.h"
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
// streamed tiles of the other two), then per warp two f32 score blocks (S, dP), two 16-bit blocks
// (P, dS), one f32 16 x D staging block for the result, and the streamed rows' lse and delta.
template <int D> struct BackwardLayout : Tiles<D> {
  using T = Tiles<D>;
  static constexpr int kScoresOffset = 4 * T::kBytes;
  static constexpr int kProbsOffset = kScoresOffset + 2 * T::kScoresBytes;
  static constexpr int kOutOffset = kProbsOffset + 2 * T::kProbsBytes;
  static constexpr int kRowStatsOffset = kOutOffset + T::kOutBytes;
  static constexpr int kBytes = kRowStatsOffset + 2 * kTileRows * 4;
};

// Per warp views of the scratch of BackwardLayout.
template <typename E, int D> struct WarpScratch {
  float* s;    // 16 x 64 scores (or their transpose), ld Tiles<D>::kScores
  float* dp;   // 16 x 64
  E* p;     // 16 x 64 probabilities, ld Tiles<D>::kProbs
  E* ds;    // 16 x 64
  float* out;  // 16 x D staging, ld Tiles<D>::kOut
  __device__ WarpScratch(unsigned char* shared, int warp) {
    using L = BackwardLayout<D>;
    s = reinterpret_cast<float*>(shared + L::kScoresOffset) + warp * 16 * L::kScores;
    dp = reinterpret_cast<float*>(shared + L::kScoresOffset + L::kScoresBytes) + warp * 16 * L::kScores;
    p = reinterpret_cast<E*>(shared + L::kProbsOffset) + warp * 16 * L::kProbs;
    ds = reinterpret_cast<E*>(shared + L::kProbsOffset + L::kProbsBytes) + warp * 16 * L::kProbs;
    out = reinterpret_cast<float*>(shared + L::kOutOffset) + warp * 16 * L::kOut;
  }
};

// dst (16 x 64, f32, ld kScores) = A_w (16 rows of `a` from row a_row, row-major tile) times the
// transpose of the 64-row tile `b` (each of its rows one output column).
template <int D, typename E>
__device__ __forceinline__ void times_transposed(const E* a, int a_row, const E* b, float* dst) {
  constexpr int kRow = Tiles<D>::kRow;
#pragma unroll
  for (int n = 0; n < kTileRows / 16; ++n) {
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

// acc[d] += lhs (16 x 64 E, ld kProbs) times the 64-row tile `rhs` (64 x D).
template <int D, typename E>
__device__ __forceinline__ void accumulate_product(Accumulator (&acc)[D / 16], const E* lhs, const E* rhs) {
  constexpr int kRow = Tiles<D>::kRow;
#pragma unroll
  for (int d = 0; d < D / 16; ++d) {
#pragma unroll
    for (int kk = 0; kk < kTileRows; kk += 16) {
      wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major> x;
      wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::row_major> y;
      wmma::load_matrix_sync(x, lhs + kk, Tiles<D>::kProbs);
      wmma::load_matrix_sync(y, rhs + kk * kRow + d * 16, kRow);
      wmma::mma_sync(acc[d], x, y, acc[d]);
    }
  }
}

// Writes scale * acc (16 x D) as E to rows [row0, row0 + 16) of a (seq, D) matrix, rows past
// seq dropped; through the warp's f32 staging block. Lane pairs split a row's columns.
template <int D, typename E>
__device__ __forceinline__ void store_rows(Accumulator (&acc)[D / 16], float scale, float* staging, E* dst,
                                           int row0, int seq, int lane) {
#pragma unroll
  for (int d = 0; d < D / 16; ++d) {
    for (int i = 0; i < acc[d].num_elements; ++i) acc[d].x[i] *= scale;
    wmma::store_matrix_sync(staging + d * 16, acc[d], Tiles<D>::kOut, wmma::mem_row_major);
  }
  __syncwarp();
  const int r = lane >> 1, half = lane & 1;
  if (row0 + r < seq) {
    E* out_row = dst + static_cast<std::int64_t>(row0 + r) * D;
    for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c) {
      store(&out_row[c], staging[r * Tiles<D>::kOut + c]);
    }
  }
  __syncwarp();
}

template <typename E, int D, bool kCausal>
__global__ void __launch_bounds__(kThreads) backward_dq_tc(const E* q, const E* k, const E* v,
                                                         const E* grad_out, const float* lse, const float* delta,
                                                         E* grad_q, int seq, int q_heads, int group,
                                                         float scale_log2, float scale) {
  using L = BackwardLayout<D>;
  extern __shared__ __align__(128) unsigned char shared[];
  E* sQ = reinterpret_cast<E*>(shared);
  E* sdO = reinterpret_cast<E*>(shared + Tiles<D>::kBytes);
  E* sK = reinterpret_cast<E*>(shared + 2 * Tiles<D>::kBytes);
  E* sV = reinterpret_cast<E*>(shared + 3 * Tiles<D>::kBytes);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  WarpScratch<E, D> w(shared, warp);

  const int q0 = static_cast<int>(blockIdx.x) * kTileRows;
  const int bh = static_cast<int>(blockIdx.y), b = bh / q_heads, h = bh % q_heads;
  const std::int64_t kv_head = static_cast<std::int64_t>(b) * (q_heads / group) + h / group;
  const std::int64_t q_offset = static_cast<std::int64_t>(bh) * seq;
  load_tile<D>(q + q_offset * D, q0, seq, sQ, tid);
  load_tile<D>(grad_out + q_offset * D, q0, seq, sdO, tid);
  const int r = lane >> 1, half = lane & 1;
  const int query = q0 + warp * 16 + r;
  const bool real_row = query < seq;
  const float lse2 = real_row ? lse[q_offset + query] * kLog2e : 0.0f;
  const float delta_q = real_row ? delta[q_offset + query] : 0.0f;
  Accumulator dq[D / 16];
#pragma unroll
  for (int d = 0; d < D / 16; ++d) wmma::fill_fragment(dq[d], 0.0f);

  const int key_end = kCausal ? min(seq, q0 + kTileRows) : seq;
  for (int k0 = 0; k0 < key_end; k0 += kTileRows) {
    __syncthreads();
    load_tile<D>(k + kv_head * seq * D, k0, seq, sK, tid);
    load_tile<D>(v + kv_head * seq * D, k0, seq, sV, tid);
    __syncthreads();
    times_transposed<D>(sQ, warp * 16, sK, w.s);    // S = Q K^T
    times_transposed<D>(sdO, warp * 16, sV, w.dp);  // dP = dO V^T
    __syncwarp();
    for (int c = half * 32; c < half * 32 + 32; ++c) {
      const int key = k0 + c;
      const bool valid = real_row && key < seq && (!kCausal || key <= query);
      const float p = valid ? exp2f(w.s[r * L::kScores + c] * scale_log2 - lse2) : 0.0f;
      store(&w.ds[r * L::kProbs + c], p * (w.dp[r * L::kScores + c] - delta_q));
    }
    __syncwarp();
    accumulate_product<D>(dq, w.ds, sK);  // dQ += dS K
  }
  store_rows<D>(dq, scale, w.out, grad_q + q_offset * D, q0 + warp * 16, seq, lane);
}

template <typename E, int D, bool kCausal>
__global__ void __launch_bounds__(kThreads) backward_dkdv_tc(const E* q, const E* k, const E* v,
                                                           const E* grad_out, const float* lse,
                                                           const float* delta, E* grad_k, E* grad_v, int seq,
                                                           int q_heads, int group, float scale_log2, float scale) {
  using L = BackwardLayout<D>;
  extern __shared__ __align__(128) unsigned char shared[];
  E* sK = reinterpret_cast<E*>(shared);
  E* sV = reinterpret_cast<E*>(shared + Tiles<D>::kBytes);
  E* sQ = reinterpret_cast<E*>(shared + 2 * Tiles<D>::kBytes);
  E* sdO = reinterpret_cast<E*>(shared + 3 * Tiles<D>::kBytes);
  float* s_lse = reinterpret_cast<float*>(shared + L::kRowStatsOffset);
  float* s_delta = s_lse + kTileRows;
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  WarpScratch<E, D> w(shared, warp);

  const int k0 = static_cast<int>(blockIdx.x) * kTileRows;
  const int kv_heads = q_heads / group;
  const int bg = static_cast<int>(blockIdx.y), b = bg / kv_heads, g = bg % kv_heads;
  const std::int64_t kv_offset = static_cast<std::int64_t>(bg) * seq;
  load_tile<D>(k + kv_offset * D, k0, seq, sK, tid);
  load_tile<D>(v + kv_offset * D, k0, seq, sV, tid);
  const int r = lane >> 1, half = lane & 1;
  const int key = k0 + warp * 16 + r;
  Accumulator dk[D / 16], dv[D / 16];
#pragma unroll
  for (int d = 0; d < D / 16; ++d) {
    wmma::fill_fragment(dk[d], 0.0f);
    wmma::fill_fragment(dv[d], 0.0f);
  }

  for (int hh = 0; hh < group; ++hh) {
    const std::int64_t q_offset = (static_cast<std::int64_t>(b) * q_heads + g * group + hh) * seq;
    for (int q0 = kCausal ? k0 : 0; q0 < seq; q0 += kTileRows) {
      __syncthreads();
      load_tile<D>(q + q_offset * D, q0, seq, sQ, tid);
      load_tile<D>(grad_out + q_offset * D, q0, seq, sdO, tid);
      for (int i = tid; i < kTileRows; i += kThreads) {
        const bool real = q0 + i < seq;
        s_lse[i] = real ? lse[q_offset + q0 + i] * kLog2e : 0.0f;
        s_delta[i] = real ? delta[q_offset + q0 + i] : 0.0f;
      }
      __syncthreads();
      times_transposed<D>(sK, warp * 16, sQ, w.s);   // S^T = K Q^T
      times_transposed<D>(sV, warp * 16, sdO, w.dp);  // dP^T = V dO^T
      __syncwarp();
      for (int c = half * 32; c < half * 32 + 32; ++c) {
        const int query = q0 + c;
        const bool valid = key < seq && query < seq && (!kCausal || query >= key);
        const float p = valid ? exp2f(w.s[r * L::kScores + c] * scale_log2 - s_lse[c]) : 0.0f;
        store(&w.p[r * L::kProbs + c], p);
        store(&w.ds[r * L::kProbs + c], p * (w.dp[r * L::kScores + c] - s_delta[c]));
      }
      __syncwarp();
      accumulate_product<D>(dv, w.p, sdO);  // dV += P^T dO
      accumulate_product<D>(dk, w.ds, sQ);  // dK += dS^T Q
    }
  }
  store_rows<D>(dk, scale, w.out, grad_k + kv_offset * D, k0 + warp * 16, seq, lane);
  store_rows<D>(dv, 1.0f, w.out, grad_v + kv_offset * D, k0 + warp * 16, seq, lane);
}

template <typename E, int D, bool kCausal>
void launch_backward(const E* q, const E* k, const E* v, const E* out, const float* lse, const E* grad_out,
            E* grad_q, E* grad_k, E* grad_v, float* delta, const FlashAttentionShape& s, int group,
            cudaStream_t stream) {
  constexpr int kBytes = BackwardLayout<D>::kBytes;
  detail::check_shared_memory("flash_attention_backward_tc", kBytes, "use the CUDA-core kernels (flash_attention_*_f32 / _bf16), which need far less");
  const std::int64_t rows = s.batch * s.q_heads * s.seq;
  launch_delta<E, D>(out, grad_out, delta, rows, stream);
  const float scale = detail::effective_scale(s);
  const int seq = static_cast<int>(s.seq), heads = static_cast<int>(s.q_heads);
  const unsigned tiles = static_cast<unsigned>(detail::ceil_div(s.seq, kTileRows));
  MYRIAD_CUDA_CHECK(
      cudaFuncSetAttribute(backward_dq_tc<E, D, kCausal>, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
  backward_dq_tc<E, D, kCausal><<<dim3(tiles, static_cast<unsigned>(s.batch * s.q_heads)), kThreads, kBytes, stream>>>(
      q, k, v, grad_out, lse, delta, grad_q, seq, heads, group, scale * kLog2e, scale);
  MYRIAD_CUDA_CHECK(
      cudaFuncSetAttribute(backward_dkdv_tc<E, D, kCausal>, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
  backward_dkdv_tc<E, D, kCausal><<<dim3(tiles, static_cast<unsigned>(s.batch * s.kv_heads)), kThreads, kBytes, stream>>>(
      q, k, v, grad_out, lse, delta, grad_k, grad_v, seq, heads, group, scale * kLog2e, scale);
}

// The body of flash_attention_backward_tc_<type> (kernels.h) for element type E; `op` names it in errors.
template <typename E>
void backward_tc(const char* op, const E* q, const E* k, const E* v, const E* out, const float* lse,
                 const E* grad_out, E* grad_q, E* grad_k, E* grad_v, float* delta, std::int64_t delta_floats,
                 const FlashAttentionShape& s, cudaStream_t stream) {
  const int group = detail::checked_group(op, s);
  if (s.batch == 0 || s.seq == 0) return;
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
