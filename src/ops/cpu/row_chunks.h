// Deterministic chunked reduction over rows, shared by the CPU ops that reduce a per-row
// quantity over N rows into a parameter gradient (norms: grad_weight / grad_bias; bias_add:
// grad_bias). Internal to src/ops/cpu.
//
// Determinism invariant: the result is bit-identical for any thread count and any schedule.
// - The rows are cut into chunks whose size depends only on N (never on the thread count).
// - Each chunk owns its own slice of `width` floats in a partial buffer (zeroed first) and
//   visits its rows in row order, so a partial's summation order is fixed; no two threads ever
//   write the same float, hence no atomics and no shared accumulators.
// - The partials are then added serially, chunk by chunk in index order (in double), into the
//   destination, which is accumulated into (`+=`), as parameter gradients are.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

namespace myriad::cpu {

// A chunking of `rows` rows that is a function of `rows` only.
struct RowChunks {
  static constexpr std::int64_t kMaxChunks = 64;       // bounds the partial buffer to 64 * width floats
  static constexpr std::int64_t kMinRowsPerChunk = 8;  // keeps chunks worth a thread's time

  std::int64_t rows_per_chunk;
  std::int64_t count;
};

inline RowChunks row_chunks(std::int64_t rows) {
  const std::int64_t per =
      std::max(RowChunks::kMinRowsPerChunk, (rows + RowChunks::kMaxChunks - 1) / RowChunks::kMaxChunks);
  return RowChunks{per, (rows + per - 1) / per};
}

// Calls row_fn(n, partial) for every row n, where `partial` is the `width` floats owned by n's
// chunk (zeroed at the start); returns the partials, one row of `width` per chunk. Chunks run
// in parallel (static schedule) when `parallel`; rows within a chunk run in order.
template <typename RowFn>
std::vector<float> for_rows_chunked(std::int64_t rows, std::int64_t width, bool parallel, RowFn&& row_fn) {
  const RowChunks chunks = row_chunks(rows);
  std::vector<float> partials(static_cast<std::size_t>(chunks.count * width), 0.0f);
#pragma omp parallel for schedule(static) if (parallel)
  for (std::int64_t k = 0; k < chunks.count; ++k) {
    float* partial = partials.data() + k * width;
    const std::int64_t end = std::min(rows, (k + 1) * chunks.rows_per_chunk);
    for (std::int64_t n = k * chunks.rows_per_chunk; n < end; ++n) row_fn(n, partial);
  }
  return partials;
}

// dst[c] += sum over chunks (in chunk order, in double) of partials[k * width + offset + c],
// for c < channels.
inline void add_chunk_sums(const std::vector<float>& partials, std::int64_t width, std::int64_t offset,
                           std::int64_t channels, float* dst) {
  const std::int64_t count = static_cast<std::int64_t>(partials.size()) / std::max<std::int64_t>(width, 1);
  for (std::int64_t c = 0; c < channels; ++c) {
    double sum = 0.0;
    for (std::int64_t k = 0; k < count; ++k) sum += partials[k * width + offset + c];
    dst[c] += static_cast<float>(sum);
  }
}

}  // namespace myriad::cpu
