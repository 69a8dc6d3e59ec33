// CompletionRequest — one validated request of the serving engine, and what its stream reports.
//
// The prompt is token ids of the served model's vocabulary (a text prompt has been encoded by the
// HTTP front: the end-of-text token, then its tokens — as Engine.generate does); `sampling` holds
// max_tokens as max_new_tokens, temperature, top_k, top_p, the seed and the stop token ids
// (nn/sampling.h draws with the request's own seed at each position, so the tokens do not depend
// on the batch). `stop` strings end the text before their first occurrence; logprobs >= 0 asks for
// each token's log-probability and that many most likely alternatives.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "myriad/nn/generate.h"

namespace myriad::serve {

struct CompletionRequest {
  std::vector<std::int32_t> prompt;
  nn::GenerateArgs sampling;
  std::vector<std::string> stop;
  std::int64_t logprobs = -1;  // -1: none; k >= 0: the token's log-probability and the top k
};

// One generated token as the stream reports it.
struct TokenEvent {
  std::int32_t token = 0;
  std::string text;  // text released with this token (may be empty: held back, or after a stop)
  float logprob = 0.0f;
  std::vector<std::pair<std::int32_t, float>> top_logprobs;
};

// Why a request ended (OpenAI's finish_reason where one applies).
enum class FinishReason { none, stop, length, cancelled, error };
const char* finish_reason_name(FinishReason reason);

}  // namespace myriad::serve
