// Counter-based random numbers (Philox-4x32-10, Salmon et al., SC'11).
//
// A value depends only on (seed, stream, index): there is no hidden state to advance, so any
// split of the work (threads, ranks, shards of a parameter) produces exactly the values the
// serial loop would. `stream` separates independent uses (e.g. one per parameter tensor or
// per dropout site); `index` is the global element index within that stream.
#pragma once

#include <array>
#include <cstdint>

namespace myriad {

class Tensor;

// One Philox-4x32-10 block: 4 random 32-bit words for counter (index, stream) under key seed.
std::array<std::uint32_t, 4> philox4x32(std::uint64_t seed, std::uint64_t stream, std::uint64_t index);

// Uniform in [0, 1) with 24 random bits, from word 0 of the block at `index`.
float philox_uniform(std::uint64_t seed, std::uint64_t stream, std::uint64_t index);
// Standard normal (Box-Muller on words 0 and 1 of the block at `index`), computed in double.
float philox_normal(std::uint64_t seed, std::uint64_t stream, std::uint64_t index);

// Fill a tensor (any strides, any floating dtype, CPU) where logical element i (row-major) gets
// the value for global index `first_index + i`.
void fill_uniform(Tensor& tensor, float low, float high, std::uint64_t seed, std::uint64_t stream,
                  std::uint64_t first_index = 0);
void fill_normal(Tensor& tensor, float mean, float std, std::uint64_t seed, std::uint64_t stream,
                 std::uint64_t first_index = 0);

}  // namespace myriad
