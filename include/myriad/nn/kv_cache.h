// KvCache — keys and values of past positions for incremental decoding (one sequence).
//
// Per layer: k, v (capacity, Hkv, D), filled at positions [0, length) — a position's heads are one
// contiguous row, so appending is one copy. Decoding position t appends its k, v at row t and
// attends over rows [0, t]; capacity is the model's context_length. The tensors live where the
// model does (ops::Placement).
#pragma once

#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/ops/placement.h"

namespace myriad::nn {

struct KvCache {
  std::vector<Tensor> k, v;  // one (capacity, Hkv, D) tensor per layer
  std::int64_t length = 0;   // positions stored

  KvCache(std::int64_t layers, std::int64_t kv_heads, std::int64_t capacity, std::int64_t head_dim,
          const ops::Placement& placement = {});
  std::int64_t capacity() const { return k.empty() ? 0 : k[0].size(0); }
};

}  // namespace myriad::nn
