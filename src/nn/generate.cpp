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
  const std::int64_t V = logits.numel();
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

std::vector<std::int32_t> generate(GptModel& model, const std::vector<std::int32_t>& prompt, const GenerateArgs& args) {
  MYRIAD_CHECK(!prompt.empty(), "generate: the prompt needs at least one token (e.g. the end-of-text token)");
  const std::int64_t block = model.config().context_length;
  MYRIAD_CHECK(static_cast<std::int64_t>(prompt.size()) <= block,
               "generate: prompt of " << prompt.size() << " tokens exceeds context_length " << block);
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
  std::vector<std::int32_t> out;
  for (std::int64_t n = 0; n < args.max_new_tokens; ++n) {
    const std::int64_t position = static_cast<std::int64_t>(prompt.size()) + n;
    std::int32_t token = sample_token(logits, args, static_cast<std::uint64_t>(position));
    out.push_back(token);
    if (token == args.stop_token || position + 1 >= block) break;
    if (recompute) {
      ids.push_back(token);
      logits = prefix_logits(model, ids);
    } else {
      logits = model.decode(token, position, *cache);
    }
  }
  return out;
}

}  // namespace myriad::nn
