// Which (query tile, key tile) pairs a flash attention kernel visits (CUDA-core and tensor-core
// kernels alike), from the AttentionGeometry of attention_shape.h:
//   KeySpans            the runs of key rows a query tile may see, ascending: every key up to the
//                       tile's last global position (causal: k_offset + j <= q_offset + i) when
//                       dense; with a layout, the rows of each key block its CSR row lists, clipped
//                       to that limit (forward and dQ kernels walk these runs tile by tile and mask
//                       a tile's rows past the run's end);
//   first_query_tile    the first query tile that may see a key tile (causal), for the dK/dV kernels;
//   key_tile_listed     whether a key tile's block is listed for a query tile's block: the dK/dV
//                       kernels walk every query tile of the causal range and skip unlisted ones.
//                       The transpose of the CSR is thus never built: each check is a binary search
//                       in one (ascending) layout row, nothing per call on the host and no extra
//                       device memory, at the cost of visiting the index of skipped query tiles.
// Requires (checked by checked_group) that a query tile and a dK/dV key tile lie inside one layout
// block: block_size a multiple of the tile, offsets multiples of block_size. Every thread of a
// block computes the same answers (they depend only on the block index), so the kernels may
// synchronise inside the loops.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "attention/attention_shape.h"

namespace myriad::cuda {
namespace {  // per translation unit, like the kernels that use them

using detail::AttentionGeometry;

// The first layout row entry of query rows from `first_query` of (batch, q head) bh: r, with the
// row's entries [row_begin[r], row_begin[r + 1]).
__device__ __forceinline__ long long layout_row(const AttentionGeometry& geo, int bh, int first_query) {
  const long long set = geo.per_head ? bh : 0;
  return set * geo.query_blocks + (geo.q_offset + first_query) / geo.block_size;
}

// Key rows [0, limit) hold every key visible (causal) to query rows up to `last_query`.
template <bool kCausal>
__device__ __forceinline__ int key_limit(const AttentionGeometry& geo, int last_query) {
  if (!kCausal) return geo.k_rows;
  const long long limit = static_cast<long long>(geo.q_offset) + last_query + 1 - geo.k_offset;
  return static_cast<int>(limit < 0 ? 0 : (limit > geo.k_rows ? geo.k_rows : limit));
}

// The runs of key rows [begin, end) that query rows [first_query, last_query] of (b, q head) bh
// may see, one per next() call (a cursor rather than a callback, so that the kernels' register
// accumulators never need to be captured):
//   KeySpans<kCausal> spans(geo, bh, first_query, last_query);
//   for (int begin = 0, end = 0; spans.next(begin, end);) { ... }
template <bool kCausal>
struct KeySpans {
  const AttentionGeometry& geo;
  int limit;
  long long entry, entries_end;  // the layout row's entries still to visit; dense: one pseudo entry

  __device__ __forceinline__ KeySpans(const AttentionGeometry& g, int bh, int first_query, int last_query)
      : geo(g), limit(key_limit<kCausal>(g, last_query)), entry(0), entries_end(1) {
    if (geo.row_begin != nullptr) {
      const long long r = layout_row(geo, bh, first_query);
      entry = geo.row_begin[r];
      entries_end = geo.row_begin[r + 1];
    }
  }

  __device__ __forceinline__ bool next(int& begin, int& end) {
    while (entry < entries_end) {
      const long long e = entry++;
      if (geo.row_begin == nullptr) {
        begin = 0;
        end = limit;
      } else {
        const int start = geo.key_blocks[e] * geo.block_size - geo.k_offset;  // negative: before k's rows
        begin = start > 0 ? start : 0;
        end = start + geo.block_size < limit ? start + geo.block_size : limit;
      }
      if (begin < end) return true;
    }
    return false;
  }
};

// The first query row, rounded down to a multiple of `tile`, that may see key row first_key.
template <bool kCausal>
__device__ __forceinline__ int first_query_tile(const AttentionGeometry& geo, int first_key, int tile) {
  if (!kCausal) return 0;
  const long long first = static_cast<long long>(geo.k_offset) + first_key - geo.q_offset;
  if (first <= 0) return 0;
  if (first >= geo.q_rows) return geo.q_rows;
  return static_cast<int>(first / tile * tile);
}

// Whether query rows from first_query of bh read key rows from first_key (each inside one
// layout block): always when dense.
__device__ __forceinline__ bool key_tile_listed(const AttentionGeometry& geo, int bh, int first_query, int first_key) {
  if (geo.row_begin == nullptr) return true;
  const long long r = layout_row(geo, bh, first_query);
  const int kb = (geo.k_offset + first_key) / geo.block_size;
  long long lo = geo.row_begin[r], hi = geo.row_begin[r + 1];
  while (lo < hi) {
    const long long mid = lo + (hi - lo) / 2;
    const int listed = geo.key_blocks[mid];
    if (listed == kb) return true;
    if (listed < kb) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  return false;
}

}  // namespace
}  // namespace myriad::cuda
