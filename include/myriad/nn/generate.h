// Autoregressive sampling with a KV cache: temperature and top-k, reproducible from a seed.
//
// The prompt is fed position by position through GptModel::decode; each new token is drawn from
// softmax(logits / temperature) restricted to the top_k largest logits (top_k 0 = all), using
// Philox(seed, stream = 0, index = position) so the same seed gives the same text. temperature
// 0 means greedy (argmax). Generation stops at max_new_tokens, at `stop_token` (>= 0) or when
// the context reaches context_length. A block-sparse model (model.attention) cannot use the KV
// cache's dense decode: each token re-runs the forward over the whole prefix (the training layout
// and selection exactly; O(T) forwards, for samples, not serving).
#pragma once

#include <cstdint>
#include <vector>

#include "myriad/nn/gpt_model.h"

namespace myriad::nn {

struct GenerateArgs {
  std::int64_t max_new_tokens = 100;
  float temperature = 0.8f;
  std::int64_t top_k = 40;
  std::uint64_t seed = 0;
  std::int32_t stop_token = -1;
};

std::vector<std::int32_t> generate(GptModel& model, const std::vector<std::int32_t>& prompt, const GenerateArgs& args);

}  // namespace myriad::nn
