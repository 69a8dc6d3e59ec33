// KvCache allocation.
#include "myriad/nn/kv_cache.h"

namespace myriad::nn {

KvCache::KvCache(std::int64_t layers, std::int64_t kv_heads, std::int64_t capacity, std::int64_t head_dim,
                 const ops::Placement& placement) {
  for (std::int64_t l = 0; l < layers; ++l) {
    k.push_back(placement.zeros({capacity, kv_heads, head_dim}));
    v.push_back(placement.zeros({capacity, kv_heads, head_dim}));
  }
}

}  // namespace myriad::nn
