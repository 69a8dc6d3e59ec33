// Internal: finding the first token id outside [0, vocab_size) in a token array.
//
// The scan is split into fixed chunks; each chunk is reduced with a branch-free OR over
// `id >= vocab` (compared as unsigned, so negative i32 ids count as out of range), which the
// compiler vectorises; only a chunk that holds a bad id is scanned again serially. Chunks run in
// parallel, and the answer (the lowest bad position) does not depend on the thread count.
#pragma once

#include <cstdint>
#include <vector>

namespace myriad::data::detail {

template <typename Id>
std::int64_t first_id_out_of_range(const Id* ids, std::int64_t count, std::uint32_t vocab_size) {
  constexpr std::int64_t kChunk = 1 << 16;
  const std::int64_t chunks = (count + kChunk - 1) / kChunk;
  std::vector<unsigned char> chunk_bad(static_cast<std::size_t>(chunks), 0);
#pragma omp parallel for schedule(static) if (chunks > 4)
  for (std::int64_t c = 0; c < chunks; ++c) {
    const Id* p = ids + c * kChunk;
    const std::int64_t n = c + 1 < chunks ? kChunk : count - c * kChunk;
    unsigned bad = 0;
    for (std::int64_t i = 0; i < n; ++i) bad |= static_cast<std::uint32_t>(p[i]) >= vocab_size;
    chunk_bad[static_cast<std::size_t>(c)] = static_cast<unsigned char>(bad);
  }
  for (std::int64_t c = 0; c < chunks; ++c) {
    if (!chunk_bad[static_cast<std::size_t>(c)]) continue;
    const std::int64_t end = c + 1 < chunks ? (c + 1) * kChunk : count;
    for (std::int64_t i = c * kChunk; i < end; ++i)
      if (static_cast<std::uint32_t>(ids[i]) >= vocab_size) return i;
  }
  return -1;
}

}  // namespace myriad::data::detail
