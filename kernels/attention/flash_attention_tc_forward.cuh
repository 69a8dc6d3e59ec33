// Flash attention forward on tensor cores (16-bit E = bf16 or f16 in and out, f32 accumulation
// and softmax), the math and contract of flash_attention_forward_bf16 (kernels.h): same out and
// lse, so the backward kernels take its results. Included by the per-type instance files
// (flash_attention_tc_bf16.cu, flash_attention_tc_f16.cu) through forward_tc<E>.
//
// Work split: a block owns 64 query rows of one (batch, query head) with 4 warps of 16 rows; key
// and value tiles of 64 rows stream through shared memory. Per tile, each warp computes its
// 16 x 64 scores S = Q K^T with WMMA (16x16x16 E -> f32) into shared memory, runs the online
// softmax there (2 lanes per row, 32 columns each; base-2 exponentials with scale * log2(e)
// folded in), writes P rounded to E, rescales its f32 output accumulator rows (kept in shared
// memory, since WMMA fragments hide which row an element belongs to) and adds P V with WMMA.
// The key tiles are attention_visibility.cuh's runs: up to the block's last global position when
// causal, the listed blocks' rows with a layout (block_size a multiple of 64, so that the block's
// query rows lie in one layout block: kFlashAttentionTcLayoutTile); a tile's keys past its run or
// after a row's position are masked (score -inf). A row that sees no key gets out = 0 and
// lse = -inf. Rows past q_seq are computed on zero padding and never stored. No T x T matrix
// exists; the order of every sum is fixed by the shape.
#pragma once

#include <cuda_runtime.h>
#include <mma.h>

#include <cstdint>

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
using namespace tc;  // kTileRows, kWarps, kThreads, kLog2e, kLn2, Tiles, load_tile

constexpr int kBlockRows = kTileRows;  // query rows per block
constexpr int kTileKeys = kTileRows;   // key / value rows per shared-memory tile

// The forward's shared memory: q, k, v tiles, then per warp scores (f32), probabilities (E)
// and the output accumulator (f32).
template <int D>
struct Layout : Tiles<D> {
  static constexpr int kQkv = Tiles<D>::kRow;
  static constexpr int kTileBytes = Tiles<D>::kBytes;
  static constexpr int kBytes = 3 * kTileBytes + Tiles<D>::kScoresBytes + Tiles<D>::kProbsBytes + Tiles<D>::kOutBytes;
};

template <typename E, int D, bool kCausal>
__global__ void __launch_bounds__(kThreads)
    flash_forward_tc(const E* q, const E* k, const E* v, E* out, float* lse, AttentionGeometry geo, float scale_log2) {
  using L = Layout<D>;
  extern __shared__ __align__(128) unsigned char shared[];
  E* sQ = reinterpret_cast<E*>(shared);
  E* sK = reinterpret_cast<E*>(shared + L::kTileBytes);
  E* sV = reinterpret_cast<E*>(shared + 2 * L::kTileBytes);
  const int tid = static_cast<int>(threadIdx.x), warp = tid / 32, lane = tid % 32;
  float* sS = reinterpret_cast<float*>(shared + 3 * L::kTileBytes) + warp * 16 * L::kScores;
  E* sP = reinterpret_cast<E*>(shared + 3 * L::kTileBytes + L::kScoresBytes) + warp * 16 * L::kProbs;
  float* sO =
      reinterpret_cast<float*>(shared + 3 * L::kTileBytes + L::kScoresBytes + L::kProbsBytes) + warp * 16 * L::kOut;

  const int q0 = static_cast<int>(blockIdx.x) * kBlockRows;
  const int q_heads = geo.q_heads, group = geo.group, q_rows = geo.q_rows, k_rows = geo.k_rows;
  const int bh = static_cast<int>(blockIdx.y), b = bh / q_heads, h = bh % q_heads;
  const std::int64_t kv_head = static_cast<std::int64_t>(b) * (q_heads / group) + h / group;
  const E* q_base = q + static_cast<std::int64_t>(bh) * q_rows * D;
  const E* k_base = k + kv_head * k_rows * D;
  const E* v_base = v + kv_head * k_rows * D;

  load_tile<D>(q_base, q0, q_rows, sQ, tid);
  // This lane's row of the warp's 16 and its half of the columns.
  const int r = lane >> 1, half = lane & 1;
  const int query = q0 + warp * 16 + r;
  const int position = geo.q_offset + query;  // global position of this row
  for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c) sO[r * L::kOut + c] = 0.0f;
  float m = -INFINITY, l = 0.0f;  // running max (base-2 units) and sum of this row

  const int last_query = min(q_rows, q0 + kBlockRows) - 1;
  KeySpans<kCausal> spans(geo, bh, q0, last_query);
  for (int begin = 0, end = 0; spans.next(begin, end);) {
    for (int k0 = begin; k0 < end; k0 += kTileKeys) {
      __syncthreads();  // every warp is done with the previous K / V tile
      load_tile<D>(k_base, k0, k_rows, sK, tid);
      load_tile<D>(v_base, k0, k_rows, sV, tid);
      __syncthreads();

      // S = Q_w K^T: 16 x 64 per warp, four 16-column fragments.
#pragma unroll
      for (int n = 0; n < kTileKeys / 16; ++n) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> scores;
        wmma::fill_fragment(scores, 0.0f);
#pragma unroll
        for (int kk = 0; kk < D; kk += 16) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major> a;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::col_major> bt;  // K^T: column n is key n
          wmma::load_matrix_sync(a, sQ + warp * 16 * L::kQkv + kk, L::kQkv);
          wmma::load_matrix_sync(bt, sK + n * 16 * L::kQkv + kk, L::kQkv);
          wmma::mma_sync(scores, a, bt, scores);
        }
        wmma::store_matrix_sync(sS + n * 16, scores, L::kScores, wmma::mem_row_major);
      }
      __syncwarp();

      // Online softmax of this lane's 32 scores of row r.
      float* row = sS + r * L::kScores + half * 32;
      float tile_max = -INFINITY;
#pragma unroll 8
      for (int c = 0; c < 32; ++c) {
        const int key = k0 + half * 32 + c;
        const bool valid = key < end && (!kCausal || geo.k_offset + key <= position);
        const float s = valid ? row[c] * scale_log2 : -INFINITY;
        row[c] = s;
        tile_max = fmaxf(tile_max, s);
      }
      tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
      const float m_new = fmaxf(m, tile_max);
      const float m_use = m_new == -INFINITY ? 0.0f : m_new;  // a row with nothing valid yet
      const float alpha = exp2f(m - m_use);                   // 0 on the first tile (m = -inf)
      float sum = 0.0f;
      E* probs = sP + r * L::kProbs + half * 32;
#pragma unroll 8
      for (int c = 0; c < 32; ++c) {
        const float p = exp2f(row[c] - m_use);
        sum += p;
        store(&probs[c], p);
      }
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      l = l * alpha + sum;
      m = m_new;
      for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c) sO[r * L::kOut + c] *= alpha;
      __syncwarp();

      // O_w += P_w V: D / 16 output fragments, each over the tile's 64 keys.
#pragma unroll
      for (int d = 0; d < D / 16; ++d) {
        wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
        wmma::load_matrix_sync(acc, sO + d * 16, L::kOut, wmma::mem_row_major);
#pragma unroll
        for (int kk = 0; kk < kTileKeys; kk += 16) {
          wmma::fragment<wmma::matrix_a, 16, 16, 16, E, wmma::row_major> p;
          wmma::fragment<wmma::matrix_b, 16, 16, 16, E, wmma::row_major> vt;
          wmma::load_matrix_sync(p, sP + kk, L::kProbs);
          wmma::load_matrix_sync(vt, sV + kk * L::kQkv + d * 16, L::kQkv);
          wmma::mma_sync(acc, p, vt, acc);
        }
        wmma::store_matrix_sync(sO + d * 16, acc, L::kOut, wmma::mem_row_major);
      }
      __syncwarp();
    }
  }

  if (query < q_rows) {
    const float inverse = l > 0.0f ? 1.0f / l : 0.0f;  // a row that saw no key: zeros, lse -inf
    E* out_row = out + (static_cast<std::int64_t>(bh) * q_rows + query) * D;
    for (int c = half * (D / 2); c < (half + 1) * (D / 2); ++c) {
      store(&out_row[c], sO[r * L::kOut + c] * inverse);
    }
    if (half == 0) lse[static_cast<std::int64_t>(bh) * q_rows + query] = l > 0.0f ? m * kLn2 + logf(l) : -INFINITY;
  }
}

template <typename E, int D, bool kCausal>
void launch_forward(const E* q, const E* k, const E* v, E* out, float* lse, const FlashAttentionShape& s, int group,
                    cudaStream_t stream) {
  constexpr int kBytes = Layout<D>::kBytes;
  detail::check_shared_memory("flash_attention_forward_tc", kBytes,
                              "use the CUDA-core kernels (flash_attention_*_f32 / _bf16), which need far less");
  MYRIAD_CUDA_CHECK(
      cudaFuncSetAttribute(flash_forward_tc<E, D, kCausal>, cudaFuncAttributeMaxDynamicSharedMemorySize, kBytes));
  const dim3 grid(static_cast<unsigned>(detail::ceil_div(s.q_seq, kBlockRows)),
                  static_cast<unsigned>(s.batch * s.q_heads));
  flash_forward_tc<E, D, kCausal><<<grid, kThreads, kBytes, stream>>>(q, k, v, out, lse, detail::geometry(s, group),
                                                                      detail::effective_scale(s) * kLog2e);
}

// The body of flash_attention_forward_tc_<type> (kernels.h) for element type E; `op` names it in errors.
template <typename E>
void forward_tc(const char* op, const E* q, const E* k, const E* v, E* out, float* lse, const FlashAttentionShape& s,
                cudaStream_t stream) {
  static_assert(kBlockRows == kFlashAttentionTcLayoutTile, "the block's query rows must lie in one layout block");
  const int group = detail::checked_group(op, s, kBlockRows);
  if (s.batch == 0 || s.q_seq == 0) return;
  detail::check_forward_buffers(op, q, k, v, out, lse, s, sizeof(E), 16);  // rows read in 16-byte chunks
  if (s.head_dim == 64) {
    s.causal ? launch_forward<E, 64, true>(q, k, v, out, lse, s, group, stream)
             : launch_forward<E, 64, false>(q, k, v, out, lse, s, group, stream);
  } else {
    s.causal ? launch_forward<E, 128, true>(q, k, v, out, lse, s, group, stream)
             : launch_forward<E, 128, false>(q, k, v, out, lse, s, group, stream);
  }
  MYRIAD_CUDA_CHECK(cudaGetLastError());
}

}  // namespace
}  // namespace myriad::cuda
