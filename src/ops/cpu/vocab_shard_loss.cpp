// CPU vocabulary-shard loss pieces and token map (ops/vocab_shard_loss.h): one loop over the rows, f32 math.
#include <cmath>
#include <cstdint>

#include "myriad/ops/vocab_shard_loss.h"

namespace myriad::cpu {

void vocab_shard_tokens(const VocabShardMap& map, const Tensor& tokens, Tensor& out) {
  const std::int32_t* t = tokens.data<std::int32_t>();
  std::int32_t* o = out.data<std::int32_t>();
  const bool state = map.output == VocabShardMap::Output::state;
  for (std::int64_t i = 0; i < tokens.numel(); ++i) {
    const std::int64_t row = static_cast<std::int64_t>(t[i]) - map.vocab_start;
    const bool here = row >= 0 && row < map.rows;
    if (t[i] == map.ignore_index) {
      o[i] = state ? -1 : map.ignore_index;
    } else if (state) {
      o[i] = here ? 1 : 0;
    } else {
      o[i] = here ? static_cast<std::int32_t>(row) : map.elsewhere;
    }
  }
}

void vocab_shard_partials(const Tensor& state, const Tensor& local_lse, const Tensor& local_loss, const Tensor& maxima,
                          Tensor& packed) {
  const std::int64_t n = state.numel();
  const std::int32_t* s = state.data<std::int32_t>();
  const float* l = local_lse.data<float>();
  const float* loss = local_loss.data<float>();
  const float* m = maxima.data<float>();
  float* sums = packed.data<float>();
  float* picked = sums + n;
  for (std::int64_t i = 0; i < n; ++i) {
    sums[i] = std::exp(l[i] - m[i]);  // exactly 0 for a rank without columns (l = -inf)
    picked[i] = s[i] == 1 ? l[i] - loss[i] : 0.0f;
  }
}

void vocab_shard_combine(const Tensor& state, const Tensor& maxima, const Tensor& packed, Tensor& lse, Tensor& losses) {
  const std::int64_t n = state.numel();
  const std::int32_t* s = state.data<std::int32_t>();
  const float* m = maxima.data<float>();
  const float* sums = packed.data<float>();
  const float* picked = sums + n;
  float* out_lse = lse.data<float>();
  float* out_losses = losses.data<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    out_lse[i] = m[i] + std::log(sums[i]);
    out_losses[i] = s[i] == -1 ? 0.0f : out_lse[i] - picked[i];
  }
}

}  // namespace myriad::cpu
