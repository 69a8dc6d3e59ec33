// Sampling over GptModel::decode with a paged KV cache (or the prefix's forward: block-sparse models).
#include "myriad/nn/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

namespace myriad::nn {

// Next-token logits of a block-sparse model: its forward over the whole prefix (the layouts and
// the selection exactly as in training; the KV cache's decode attends densely).
Tensor prefix_logits(GptModel& model, const std::vector<std::int32_t>& ids) {
  const auto T = static_cast<std::int64_t>(ids.size());
  Tensor tokens = Tensor::empty({1, T}, DType::i32);
  std::copy(ids.begin(), ids.end(), tokens.data<std::int32_t>());
  return model.forward_logits(tokens)
      .view({T, model.config().vocab_size})
      .slice(0, T - 1, T)
      .view({model.config().vocab_size});
}

void check_generate_args(const GenerateArgs& args) {
  MYRIAD_CHECK(std::isfinite(args.temperature) && args.temperature >= 0.0f,
               "generate: temperature " << args.temperature << " must be finite and >= 0 (0 = greedy)");
  MYRIAD_CHECK(args.top_k >= 0, "generate: top_k " << args.top_k << " must be >= 0 (0 = the whole vocabulary)");
  MYRIAD_CHECK(args.max_new_tokens >= 0, "generate: max_new_tokens " << args.max_new_tokens << " must be >= 0");
  MYRIAD_CHECK(std::isfinite(args.top_p) && args.top_p > 0.0f && args.top_p <= 1.0f,
               "generate: top_p " << args.top_p << " must be in (0, 1] (1 = no nucleus cut)");
}

Generation generate_with_logprobs(GptModel& model, const std::vector<std::int32_t>& prompt_in,
                                  const GenerateArgs& args) {
  check_generate_args(args);
  MYRIAD_CHECK(!prompt_in.empty(), "generate: the prompt needs at least one token (e.g. the end-of-text token)");
  const std::int64_t block = model.config().context_length;
  const auto given = static_cast<std::int64_t>(prompt_in.size());
  MYRIAD_CHECK(given <= block || args.truncate_prompt,
               "generate: prompt of " << given << " tokens exceeds context_length " << block
                                      << " (ask for truncation to use its last " << block << " tokens)");
  const std::int64_t keep = std::min(given, block);  // truncated: the prompt's end
  const std::vector<std::int32_t> prompt(prompt_in.end() - keep, prompt_in.end());
  for (std::int32_t id : prompt) {
    MYRIAD_CHECK(id >= 0 && id < model.config().vocab_size, "generate: prompt token "
                                                                << id << " is outside the vocabulary [0, "
                                                                << model.config().vocab_size << ")");
  }
  Generation result;
  result.prompt_used = keep;
  result.finish_reason = "max_new_tokens";
  const bool recompute = model.config().attention.block_sparse();
  const std::int64_t V = model.config().vocab_size;
  // Dense models: one sequence whose blocks cover the whole context.
  constexpr std::int64_t kBlockSize = 16;
  std::optional<PagedKvCache> cache;
  std::vector<std::int32_t> table;
  if (!recompute) {
    cache.emplace(model.make_paged_kv_cache(kBlockSize, (block + kBlockSize - 1) / kBlockSize));
    for (std::int64_t b = 0; b < cache->num_blocks; ++b) table.push_back(static_cast<std::int32_t>(b));
  }
  auto step = [&](std::vector<std::int32_t> tokens, std::int64_t start) {
    return model.decode({DecodeSequence{.tokens = std::move(tokens), .start = start, .blocks = &table}}, *cache);
  };
  std::vector<std::int32_t> ids = prompt;  // the prefix, for block-sparse models
  Tensor logits = recompute ? prefix_logits(model, ids) : step(prompt, 0);
  for (std::int64_t n = 0; n < args.max_new_tokens; ++n) {
    const std::int64_t position = static_cast<std::int64_t>(prompt.size()) + n;
    const float* row = logits.data<float>();
    std::int32_t token = sample_token(row, V, args, static_cast<std::uint64_t>(position));
    result.ids.push_back(token);
    result.logprobs.push_back(log_probability(row, V, token));
    if (std::find(args.stop_tokens.begin(), args.stop_tokens.end(), token) != args.stop_tokens.end()) {
      result.finish_reason = "stop_token";
      break;
    }
    if (position >= block) {  // the token just drawn has no place in the context to be fed back
      result.finish_reason = "context_length";
      break;
    }
    if (recompute) {
      ids.push_back(token);
      logits = prefix_logits(model, ids);
    } else {
      logits = step({token}, position);
    }
  }
  return result;
}

std::vector<std::int32_t> generate(GptModel& model, const std::vector<std::int32_t>& prompt, const GenerateArgs& args) {
  return generate_with_logprobs(model, prompt, args).ids;
}

}  // namespace myriad::nn
