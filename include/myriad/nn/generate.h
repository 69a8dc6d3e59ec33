// Autoregressive sampling with a paged KV cache: temperature, top-k and top-p, reproducible from a seed.
//
// The prompt runs through GptModel::decode in one step (a sequence of one, its blocks covering the
// context), then each drawn token; each new token is drawn by nn::sample_token (sampling.h:
// softmax(logits / temperature) over the top_k largest logits (top_k 0 = all), cut to the top_p
// nucleus) with draw index = its position, so the same seed gives the same text. temperature
// 0 means greedy (argmax). Generation stops at max_new_tokens, at any of `stop_tokens` (the stop
// token is returned as the last id) or when the context is full (the prompt and the new tokens
// number context_length + 1: the last one is drawn but not fed back). Each returned id
// comes with its log-probability under the model (log-softmax of the raw logits, before
// temperature and top-k). A negative or non-finite temperature, a negative top_k or
// max_new_tokens, a top_p outside (0, 1], and a prompt longer than context_length are refused (Generation::prompt_used
// with truncate_prompt: the prompt's last context_length tokens are used instead). A prompt
// that fills the context still gets its next token. A block-sparse model (model.attention) cannot use the KV
// cache's dense decode: each token re-runs the forward over the whole prefix (the training layout
// and selection exactly; O(T) forwards, for samples, not serving).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "myriad/nn/gpt_model.h"
#include "myriad/nn/sampling.h"

namespace myriad::nn {

struct GenerateArgs {
  std::int64_t max_new_tokens = 100;
  float temperature = 0.8f;
  std::int64_t top_k = 40;
  float top_p = 1.0f;  // the nucleus: keep the most likely candidates holding this share (1 = all)
  std::uint64_t seed = 0;
  std::vector<std::int32_t> stop_tokens;
  bool truncate_prompt = false;  // a prompt longer than context_length: keep its end instead of refusing
  // Draw only ids below this (the tokenizer's vocabulary inside a padded model vocabulary); 0 = all.
  std::int64_t vocab_limit = 0;
};

struct Generation {
  std::vector<std::int32_t> ids;  // the new tokens
  std::vector<float> logprobs;    // log p(ids[i] | prefix) under the model
  std::string finish_reason;      // "stop_token", "max_new_tokens" or "context_length"
  std::int64_t prompt_used = 0;   // prompt tokens the model saw (fewer when truncated)
};

// The arguments' checks (shared with callers that validate before a collective).
void check_generate_args(const GenerateArgs& args);

Generation generate_with_logprobs(GptModel& model, const std::vector<std::int32_t>& prompt, const GenerateArgs& args);
std::vector<std::int32_t> generate(GptModel& model, const std::vector<std::int32_t>& prompt, const GenerateArgs& args);

}  // namespace myriad::nn
