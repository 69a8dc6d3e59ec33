// Host-side shape rules shared by the flash attention launchers (CUDA-core and tensor-core):
// the argument checks every launcher runs first, and the softmax scale (0 = 1 / sqrt(D)).
#pragma once

#include <cmath>
#include <cstdint>
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

inline float effective_scale(const FlashAttentionShape& s) {
  return s.scale != 0.0f ? s.scale : 1.0f / std::sqrt(static_cast<float>(s.head_dim));
}

}  // namespace myriad::cuda::detail
