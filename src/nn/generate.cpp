// Temperature / top-k sampling over GptModel::decode (or the prefix's forward: block-sparse models).
#include "myriad/nn/generate.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <optional>

#include "myriad/core/philox.h"

namespace myriad::nn {

namespace {

std::int32_t sample_token(const Tensor& logits, const GenerateArgs& args, std::uint64_t draw_index) {
  const float* l = logits.data<float>();
  const std::int64_t V =
      args.vocab_limit > 0 ? std::min<std::int64_t>(args.vocab_limit, logits.numel()) : logits.numel();
  if (args.temperature <= 0.0f) return static_cast<std::int32_t>(std::max_element(l, l + V) - l);
  std::vector<std::int32_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::int64_t k = args.top_k > 0 ? std::min<std::int64_t>(args.top_k, V) : V;
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [&](std::int32_t a, std::int32_t b) { return l[a] > l[b] || (l[a] == l[b] && a < b); });
  std::vector<double> weights(k);
  double total = 0.0;
  for (std::int64_t i = 0; i < k; ++i) {
    weights[i] = std::exp((static_cast<double>(l[order[i]]) - l[order[0]]) / args.temperature);
    total += weights[i];
  }
  double u = static_cast<double>(philox_uniform(args.seed, 0, draw_index)) * total;
  for (std::int64_t i = 0; i < k; ++i) {
    if ((u -= weights[i]) < 0.0) return order[i];
  }
  return order[k - 1];
}

}  // namespace

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
}

namespace {

// log softmax(logits)[token] in float64.
float log_probability(const Tensor& logits, std::int32_t token) {
  const float* l = logits.data<float>();
  const std::int64_t V = logits.numel();
  const double top = *std::max_element(l, l + V);
  double total = 0.0;
  for (std::int64_t i = 0; i < V; ++i) total += std::exp(static_cast<double>(l[i]) - top);
  return static_cast<float>(static_cast<double>(l[token]) - top - std::log(total));
}

}  // namespace

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
  std::optional<KvCache> cache;
  if (!recompute) cache.emplace(model.make_kv_cache());
  std::vector<std::int32_t> ids = prompt;  // the prefix, for block-sparse models
  Tensor logits;
  if (recompute) {
    logits = prefix_logits(model, ids);
  } else {
    for (std::size_t i = 0; i < prompt.size(); ++i)
      logits = model.decode(prompt[i], static_cast<std::int64_t>(i), *cache);
  }
  for (std::int64_t n = 0; n < args.max_new_tokens; ++n) {
    const std::int64_t position = static_cast<std::int64_t>(prompt.size()) + n;
    std::int32_t token = sample_token(logits, args, static_cast<std::uint64_t>(position));
    result.ids.push_back(token);
    result.logprobs.push_back(log_probability(logits, token));
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
      logits = model.decode(token, position, *cache);
    }
  }
  return result;
}

std::vector<std::int32_t> generate(GptModel& model, const std::vector<std::int32_t>& prompt, const GenerateArgs& args) {
  return generate_with_logprobs(model, prompt, args).ids;
}

}  // namespace myriad::nn
