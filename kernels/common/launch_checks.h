// Argument checks shared by the host launchers in kernels/. Each throws myriad::Error whose
// message starts with the launcher's name and names the offending argument and value. Pure host
// code: nothing here touches the GPU, so a bad call fails before anything is enqueued.
#pragma once

#include <algorithm>

#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <limits>
#include <utility>

#include "myriad/core/error.h"

namespace myriad::cuda::detail {

inline bool is_aligned(const void* ptr, std::size_t alignment) {
  return reinterpret_cast<std::uintptr_t>(ptr) % alignment == 0;
}

inline void check_count(const char* op, const char* name, std::int64_t value) {
  MYRIAD_CHECK(value >= 0, op << ": " << name << " must be >= 0, got " << value);
}

// `ptr` must be non-null and aligned for its element type.
inline void check_pointer(const char* op, const char* name, const void* ptr, std::size_t alignment) {
  MYRIAD_CHECK(ptr != nullptr, op << ": " << name << " is null");
  MYRIAD_CHECK(is_aligned(ptr, alignment),
               op << ": " << name << " = " << ptr << " is not " << alignment << "-byte aligned");
}

// Like check_pointer, but null is allowed (an optional argument).
inline void check_optional_pointer(const char* op, const char* name, const void* ptr, std::size_t alignment) {
  if (ptr != nullptr) check_pointer(op, name, ptr, alignment);
}

inline bool ranges_overlap(const void* a, std::size_t a_bytes, const void* b, std::size_t b_bytes) {
  auto pa = reinterpret_cast<std::uintptr_t>(a), pb = reinterpret_cast<std::uintptr_t>(b);
  return a != nullptr && b != nullptr && a_bytes > 0 && b_bytes > 0 && pa < pb + b_bytes && pb < pa + a_bytes;
}

// The output range must not overlap the input range at all.
inline void check_disjoint(const char* op, const char* out_name, const void* out, std::size_t out_bytes,
                           const char* in_name, const void* in, std::size_t in_bytes) {
  MYRIAD_CHECK(!ranges_overlap(out, out_bytes, in, in_bytes), op << ": " << out_name << " [" << out << ", +"
                                                                 << out_bytes << " bytes) overlaps " << in_name << " ["
                                                                 << in << ", +" << in_bytes << " bytes)");
}

// Elementwise ops may run in place (same start) but not on shifted, overlapping ranges.
inline void check_same_or_disjoint(const char* op, const char* out_name, const void* out, const char* in_name,
                                   const void* in, std::size_t bytes) {
  if (out == in) return;
  check_disjoint(op, out_name, out, bytes, in_name, in, bytes);
}

// An elementwise launcher's checks over n elements (after check_count and the n == 0 return):
// the inputs' then the output's pointer non-null and aligned for T, and the output the same
// buffer as each input or disjoint from it.
template <typename T>
void check_elementwise(const char* op, std::initializer_list<std::pair<const char*, const T*>> inputs,
                       const char* out_name, const T* out, std::int64_t n) {
  for (const auto& [name, input] : inputs) check_pointer(op, name, input, alignof(T));
  check_pointer(op, out_name, out, alignof(T));
  const std::size_t bytes = static_cast<std::size_t>(n) * sizeof(T);
  for (const auto& [name, input] : inputs) check_same_or_disjoint(op, out_name, out, name, input, bytes);
}

// ceil(a / b) for a >= 0, b > 0, without overflow near INT64_MAX.
inline std::int64_t ceil_div(std::int64_t a, std::int64_t b) { return a / b + (a % b != 0 ? 1 : 0); }

// Blocks needed for `items` work items of `per_block` each; throws past CUDA's grid.x limit.
inline unsigned grid_blocks(const char* op, std::int64_t items, std::int64_t per_block) {
  const std::int64_t blocks = ceil_div(items, per_block);
  MYRIAD_CHECK(blocks <= std::numeric_limits<std::int32_t>::max(),
               op << ": " << items << " work items need " << blocks << " blocks, more than a grid holds");
  return static_cast<unsigned>(blocks);
}

// Blocks for a grid-stride loop over `items` of `per_block` threads: one item per thread, capped
// at `max_blocks` (the loop strides over the rest).
inline unsigned grid_stride_blocks(const char* op, std::int64_t items, std::int64_t per_block,
                                   std::int64_t max_blocks = 65536) {
  return static_cast<unsigned>(std::min<std::int64_t>(grid_blocks(op, items, per_block), max_blocks));
}

}  // namespace myriad::cuda::detail
