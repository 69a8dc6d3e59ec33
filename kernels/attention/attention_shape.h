// Host-side shape rules shared by the flash attention launchers (CUDA-core and tensor-core):
// the argument and buffer checks every launcher runs first, and the softmax scale (0 = 1 / sqrt(D)).
#pragma once

#include <cmath>
#include <cstdint>
#include <tuple>
#include <utility>

#include "common/launch_checks.h"
#include "myriad/core/error.h"
#include "myriad/cuda/kernels.h"

namespace myriad::cuda::detail {

// Checks counts, head grouping, head dim and grid limits; returns q_heads / kv_heads (the number
// of query heads sharing one key/value head: query head h reads key/value head h / group).
inline int checked_group(const char* op, const FlashAttentionShape& s) {
  for (auto [name, value] : {std::pair<const char*, std::int64_t>{"batch", s.batch}, {"seq", s.seq}}) {
    check_count(op, name, value);
  }
  MYRIAD_CHECK(s.q_heads >= 1 && s.kv_heads >= 1 && s.q_heads % s.kv_heads == 0,
               op << ": q_heads (" << s.q_heads << ") must be a positive multiple of kv_heads (" << s.kv_heads << ")");
  MYRIAD_CHECK(s.head_dim == 64 || s.head_dim == 128, op << ": head_dim " << s.head_dim << " is not 64 or 128");
  MYRIAD_CHECK(s.seq <= 0x7fffffff && s.batch * s.q_heads <= 65535,
               op << ": seq " << s.seq << " or batch * q_heads " << s.batch * s.q_heads << " exceeds the grid");
  return static_cast<int>(s.q_heads / s.kv_heads);
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
  const std::size_t q_bytes = static_cast<std::size_t>(s.batch * s.q_heads * s.seq * s.head_dim) * element_bytes;
  const std::size_t kv_bytes = static_cast<std::size_t>(s.batch * s.kv_heads * s.seq * s.head_dim) * element_bytes;
  check_disjoint(op, "out", out, q_bytes, "q", q, q_bytes);
  check_disjoint(op, "out", out, q_bytes, "k", k, kv_bytes);
  check_disjoint(op, "out", out, q_bytes, "v", v, kv_bytes);
}

// The same for a backward launcher: also grad_out, the three gradients (disjoint from every
// input) and delta's size (batch * q_heads * seq floats).
inline void check_backward_buffers(const char* op, const void* q, const void* k, const void* v, const void* out,
                                   const float* lse, const void* grad_out, const void* grad_q, const void* grad_k,
                                   const void* grad_v, const float* delta, std::int64_t delta_floats,
                                   const FlashAttentionShape& s, std::size_t element_bytes, std::size_t alignment) {
  for (auto [name, ptr] : {std::pair<const char*, const void*>{"q", q}, {"k", k}, {"v", v}, {"out", out},
                           {"grad_out", grad_out}, {"grad_q", grad_q}, {"grad_k", grad_k}, {"grad_v", grad_v}}) {
    check_pointer(op, name, ptr, alignment);
  }
  check_pointer(op, "lse", lse, alignof(float));
  check_pointer(op, "delta", delta, alignof(float));
  const std::int64_t rows = s.batch * s.q_heads * s.seq;
  MYRIAD_CHECK(delta_floats >= rows, op << ": delta holds " << delta_floats << " floats, needs " << rows
                                        << " (batch * q_heads * seq)");
  const std::size_t q_bytes = static_cast<std::size_t>(rows * s.head_dim) * element_bytes;
  const std::size_t kv_bytes = static_cast<std::size_t>(s.batch * s.kv_heads * s.seq * s.head_dim) * element_bytes;
  for (auto [name, grad, bytes] : {std::tuple<const char*, const void*, std::size_t>{"grad_q", grad_q, q_bytes},
                                   {"grad_k", grad_k, kv_bytes}, {"grad_v", grad_v, kv_bytes}}) {
    for (auto [in_name, in, in_bytes] :
         {std::tuple<const char*, const void*, std::size_t>{"q", q, q_bytes}, {"k", k, kv_bytes}, {"v", v, kv_bytes},
          {"out", out, q_bytes}, {"grad_out", grad_out, q_bytes}}) {
      check_disjoint(op, name, grad, bytes, in_name, in, in_bytes);
    }
  }
}

inline float effective_scale(const FlashAttentionShape& s) {
  return s.scale != 0.0f ? s.scale : 1.0f / std::sqrt(static_cast<float>(s.head_dim));
}

}  // namespace myriad::cuda::detail
