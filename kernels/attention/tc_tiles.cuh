// Shared-memory tiles of the tensor-core flash attention kernels (flash_attention_tc_*.cuh): 64-row
// 16-bit (bf16 or f16) tiles of q, k, v or dO with padded rows, and the padded leading dimensions
// of the per-warp f32 score and 16-bit probability scratch. Every leading dimension is a multiple of 8 (16-bit) or 4
// (f32) elements as WMMA requires, and every fragment pointer the kernels form lands on a 32-byte
// boundary (each region's size is a multiple of 32 bytes).
#pragma once

#include <cstdint>

namespace myriad::cuda::tc {

constexpr int kTileRows = 64;  // rows of q / k / v / dO per tile, and query or key rows per block
constexpr int kWarps = 4;      // 16 rows of the block each
constexpr int kThreads = kWarps * 32;
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int D>
struct Tiles {
  static constexpr int kRow = D + 8;                   // 16-bit elements per padded tile row
  static constexpr int kBytes = kTileRows * kRow * 2;  // one q / k / v / dO tile
  static constexpr int kScores = kTileRows + 4;        // f32 elements per row of a warp's 16 x 64 scores
  static constexpr int kScoresBytes = kWarps * 16 * kScores * 4;
  static constexpr int kProbs = kTileRows + 8;  // 16-bit elements per row of a warp's 16 x 64 probabilities
  static constexpr int kProbsBytes = kWarps * 16 * kProbs * 2;
  static constexpr int kOut = D + 4;  // f32 elements per row of a warp's 16 x D accumulator
  static constexpr int kOutBytes = kWarps * 16 * kOut * 4;
};

// Rows [first, first + 64) of a (seq, D) matrix of 16-bit E into a padded tile; rows past `seq` are zero.
// All kBlockThreads threads of the block take part (tid in [0, kBlockThreads)).
template <int D, int kBlockThreads = kThreads, typename E>
__device__ __forceinline__ void load_tile(const E* src, int first, int seq, E* dst, int tid) {
  static_assert(sizeof(E) == 2, "tiles hold 16-bit elements");
  constexpr int kChunks = D / 8;  // 16-byte chunks per row
  for (int i = tid; i < kTileRows * kChunks; i += kBlockThreads) {
    const int row = i / kChunks, chunk = i % kChunks;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (first + row < seq) {
      value = *reinterpret_cast<const uint4*>(src + static_cast<std::int64_t>(first + row) * D + chunk * 8);
    }
    *reinterpret_cast<uint4*>(dst + row * Tiles<D>::kRow + chunk * 8) = value;
  }
}

}  // namespace myriad::cuda::tc
