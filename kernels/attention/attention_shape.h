// Host-side shape rules shared by the flash attention launchers (CUDA-core and tensor-core):
// the argument and buffer checks every launcher runs first, the softmax scale (0 = 1 / sqrt(D)),
// and the kernels' view of the problem (AttentionGeometry: row counts, global offsets, the
// device layout arrays), which attention_visibility.cuh turns into the key tiles a query tile
// reads and the query tiles a key tile is read by.
#pragma once

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <tuple>
#include <utility>

#include "common/launch_checks.h"
#include "myriad/core/error.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda::detail {

// What a kernel needs to know about rows and visibility, as ints (positions fit: checked_group).
struct AttentionGeometry {
  int q_rows = 0, k_rows = 0;      // Tq, Tk
  int q_offset = 0, k_offset = 0;  // global positions of row 0 of q and of k
  int q_heads = 0, group = 1;      // query heads; query heads per key/value head
  // Block-sparse layout (row_begin null: dense). Layout rows r = set * query_blocks + qb.
  const std::int64_t* row_begin = nullptr;
  const std::int32_t* key_blocks = nullptr;
  int block_size = 1, query_blocks = 0;
  bool per_head = false;  // sets = batch * q_heads (set = b * q_heads + h), else one shared set
};

// Checks counts, head grouping, head dim, grid limits and the layout's host-visible rules (see
// kernels.h; `tile` is the kernel's query rows per block); returns q_heads / kv_heads (the number
// of query heads sharing one key/value head: query head h reads key/value head h / group).
inline int checked_group(const char* op, const FlashAttentionShape& s, std::int64_t tile) {
  const std::int64_t Tq = s.q_seq, Tk = s.key_rows();
  for (auto [name, value] : {std::pair<const char*, std::int64_t>{"batch", s.batch},
                             {"q_seq", Tq},
                             {"k_seq", Tk},
                             {"q_offset", s.q_offset},
                             {"k_offset", s.k_offset}}) {
    check_count(op, name, value);
  }
  MYRIAD_CHECK(s.q_heads >= 1 && s.kv_heads >= 1 && s.q_heads % s.kv_heads == 0,
               op << ": q_heads (" << s.q_heads << ") must be a positive multiple of kv_heads (" << s.kv_heads << ")");
  MYRIAD_CHECK(s.head_dim == 64 || s.head_dim == 128, op << ": head_dim " << s.head_dim << " is not 64 or 128");
  MYRIAD_CHECK(s.q_offset + Tq <= INT_MAX && s.k_offset + Tk <= INT_MAX && s.batch * s.q_heads <= 65535,
               op << ": positions up to q_offset + q_seq = " << s.q_offset + Tq << " / k_offset + k_seq = "
                  << s.k_offset + Tk << " or batch * q_heads " << s.batch * s.q_heads << " exceed the grid");
  const FlashAttentionLayout& l = s.layout;
  if (l.row_begin == nullptr) return static_cast<int>(s.q_heads / s.kv_heads);
  check_pointer(op, "layout.row_begin", l.row_begin, alignof(std::int64_t));
  check_pointer(op, "layout.key_blocks", l.key_blocks, alignof(std::int32_t));
  MYRIAD_CHECK(l.block_size >= 1 && l.block_size % tile == 0,
               op << ": layout block_size " << l.block_size << " must be a positive multiple of " << tile
                  << " (the kernel's query tile, which must lie inside one layout block)");
  MYRIAD_CHECK(l.sets == 1 || l.sets == s.batch * s.q_heads,
               op << ": layout has " << l.sets << " sets, expected 1 or batch * q_heads = " << s.batch * s.q_heads);
  MYRIAD_CHECK(s.q_offset % l.block_size == 0 && s.k_offset % l.block_size == 0,
               op << ": q_offset " << s.q_offset << " and k_offset " << s.k_offset
                  << " must be multiples of the layout's block_size " << l.block_size);
  const std::int64_t covered = l.query_blocks * l.block_size;
  MYRIAD_CHECK(l.query_blocks >= 0 && covered <= INT_MAX && s.q_offset + Tq <= covered && s.k_offset + Tk <= covered,
               op << ": rows up to position " << std::max(s.q_offset + Tq, s.k_offset + Tk) << " lie outside the "
                  << "layout's " << l.query_blocks << " blocks of " << l.block_size);
  return static_cast<int>(s.q_heads / s.kv_heads);
}

inline AttentionGeometry geometry(const FlashAttentionShape& s, int group) {
  AttentionGeometry g;
  g.q_rows = static_cast<int>(s.q_seq);
  g.k_rows = static_cast<int>(s.key_rows());
  g.q_offset = static_cast<int>(s.q_offset);
  g.k_offset = static_cast<int>(s.k_offset);
  g.q_heads = static_cast<int>(s.q_heads);
  g.group = group;
  g.row_begin = s.layout.row_begin;
  g.key_blocks = s.layout.key_blocks;
  if (g.row_begin != nullptr) {
    g.block_size = static_cast<int>(s.layout.block_size);
    g.query_blocks = static_cast<int>(s.layout.query_blocks);
    g.per_head = s.layout.sets > 1;
  }
  return g;
}

// Pointer and overlap checks of a forward launcher (element_bytes per q/k/v/out element, each
// pointer aligned to `alignment`); call after checked_group, for a non-empty shape.
inline void check_forward_buffers(const char* op, const void* q, const void* k, const void* v, const void* out,
                                  const float* lse, const FlashAttentionShape& s, std::size_t element_bytes,
                                  std::size_t alignment) {
  for (auto [name, ptr] : {std::pair<const char*, const void*>{"q", q}, {"k", k}, {"v", v}, {"out", out}}) {
    check_pointer(op, name, ptr, alignment);
  }
  check_pointer(op, "lse", lse, alignof(float));
  const std::size_t q_bytes = static_cast<std::size_t>(s.batch * s.q_heads * s.q_seq * s.head_dim) * element_bytes;
  const std::size_t kv_bytes =
      static_cast<std::size_t>(s.batch * s.kv_heads * s.key_rows() * s.head_dim) * element_bytes;
  check_disjoint(op, "out", out, q_bytes, "q", q, q_bytes);
  check_disjoint(op, "out", out, q_bytes, "k", k, kv_bytes);
  check_disjoint(op, "out", out, q_bytes, "v", v, kv_bytes);
}

// The same for a backward launcher: also grad_out, the three gradients (disjoint from every
// input) and delta's size (batch * q_heads * q_seq floats).
inline void check_backward_buffers(const char* op, const void* q, const void* k, const void* v, const void* out,
                                   const float* lse, const void* grad_out, const void* grad_q, const void* grad_k,
                                   const void* grad_v, const float* delta, std::int64_t delta_floats,
                                   const FlashAttentionShape& s, std::size_t element_bytes, std::size_t alignment) {
  for (auto [name, ptr] : {std::pair<const char*, const void*>{"q", q},
                           {"k", k},
                           {"v", v},
                           {"out", out},
                           {"grad_out", grad_out},
                           {"grad_q", grad_q},
                           {"grad_k", grad_k},
                           {"grad_v", grad_v}}) {
    check_pointer(op, name, ptr, alignment);
  }
  check_pointer(op, "lse", lse, alignof(float));
  check_pointer(op, "delta", delta, alignof(float));
  const std::int64_t rows = s.batch * s.q_heads * s.q_seq;
  MYRIAD_CHECK(delta_floats >= rows,
               op << ": delta holds " << delta_floats << " floats, needs " << rows << " (batch * q_heads * q_seq)");
  const std::size_t q_bytes = static_cast<std::size_t>(rows * s.head_dim) * element_bytes;
  const std::size_t kv_bytes =
      static_cast<std::size_t>(s.batch * s.kv_heads * s.key_rows() * s.head_dim) * element_bytes;
  for (auto [name, grad, bytes] : {std::tuple<const char*, const void*, std::size_t>{"grad_q", grad_q, q_bytes},
                                   {"grad_k", grad_k, kv_bytes},
                                   {"grad_v", grad_v, kv_bytes}}) {
    for (auto [in_name, in, in_bytes] : {std::tuple<const char*, const void*, std::size_t>{"q", q, q_bytes},
                                         {"k", k, kv_bytes},
                                         {"v", v, kv_bytes},
                                         {"out", out, q_bytes},
                                         {"grad_out", grad_out, q_bytes}}) {
      check_disjoint(op, name, grad, bytes, in_name, in, in_bytes);
    }
  }
}

inline float effective_scale(const FlashAttentionShape& s) {
  return s.scale != 0.0f ? s.scale : 1.0f / std::sqrt(static_cast<float>(s.head_dim));
}

}  // namespace myriad::cuda::detail
