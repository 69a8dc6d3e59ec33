// The one model with mixture-of-experts blocks (nn/moe_layer.h): every parameter's gradient
// (router, experts, shared experts, the dense blocks around them) against directional central
// differences of the whole objective (LM loss + load-balancing + z losses), with tokens dropped
// over capacity; exact accumulation over micro-batches (capacity is per sequence); identical
// gradients under every recompute mode, full recompute keeping no expert activations (KV-cache
// decoding: test_gpt_model.cpp).
#include <gtest/gtest.h>

#include <cmath>

#include "myriad/core/philox.h"
#include "myriad/nn/gpt_model.h"
#include "reference.h"

namespace myriad::nn {
namespace {

// LLaMA-style, every block MoE: 4 experts, top 2, one shared expert, capacity 2 per sequence.
TransformerConfig moe_llama() {
  TransformerConfig c = TransformerConfig::llama(13, 2, 4, 2, 16, 8);
  c.moe.num_experts = 4;
  c.moe.top_k = 2;
  c.moe.shared_experts = 1;
  c.moe.expert_ffn = 12;
  c.moe.expert_capacity = 2;
  c.moe.aux_loss_coef = 0.1f;
  c.moe.z_loss_coef = 0.01f;
  return c;
}

// GPT-2-style, MoE in block 1 only, sigmoid scores without renormalisation, dropless.
TransformerConfig moe_gpt2() {
  TransformerConfig c = TransformerConfig::gpt2(13, 2, 2, 8, 8);
  c.moe.num_experts = 3;
  c.moe.top_k = 2;
  c.moe.every = 2;
  c.moe.score = RouterScore::sigmoid;
  c.moe.normalize_top_k = false;
  c.moe.aux_loss_coef = 0.1f;
  c.moe.z_loss_coef = 0.01f;
  return c;
}

struct MoeBatch {
  Tensor ids, targets;
};

MoeBatch random_batch(std::int64_t B, std::int64_t T, std::uint64_t seed, std::uint64_t stream) {
  MoeBatch b{testing::random_ids({B, T}, 13, seed, stream), testing::random_ids({B, T}, 13, seed, stream + 1)};
  b.targets.data<std::int32_t>()[1] = GptModel::kIgnoreIndex;
  return b;
}

// The training objective the backward differentiates (loss_scale = 1 / valid tokens) and the
// routing it took (per-expert counts and drops, to notice a flipped choice).
struct Objective {
  double value = 0.0;
  std::vector<std::int64_t> routing;
};

Objective objective(GptModel& model, const MoeBatch& b) {
  model.reset_moe_stats();
  LossSum l = model.forward_loss(b.ids, b.targets);
  const MoeSpec& moe = model.config().moe;
  Objective o;
  o.value = l.sum;
  const std::int64_t E = moe.num_experts;
  for (const MoeLayerStats& s : model.moe_stats()) {
    const std::vector<double> t = s.host_totals();  // routed per expert, dropped, aux, z
    o.value += moe.aux_loss_coef * static_cast<double>(b.ids.size(1)) * t[E + 1] + moe.z_loss_coef * t[E + 2];
    for (std::int64_t e = 0; e <= E; ++e) o.routing.push_back(static_cast<std::int64_t>(t[e]));
  }
  o.value /= static_cast<double>(l.tokens);
  return o;
}

// Checks every parameter at one base point; returns the parameters skipped because a shift of
// +-eps changed a routing decision there (the objective is not differentiable across a choice).
int check_gradients_at(const TransformerConfig& config, bool expect_drops, std::uint64_t seed) {
  MYRIAD_SEED_TRACE(seed);
  GptModel model(config);
  model.initialize(seed);
  // Larger weights than the 0.02 init make every path contribute visibly to the loss; the router's
  // largest, so that the experts' scores are well apart and a shift rarely nears a tie (where the
  // top-k weights bend sharply and the central difference is poor).
  for (Parameter& p : model.parameters().all()) {
    const float std = p.name.find(".router.") != std::string::npos ? 1.0f : 0.3f;
    if (p.init == ParamInit::normal) fill_normal(p.value, 0.0f, std, seed, stable_name_hash(p.name) + 1);
  }
  MoeBatch batch = random_batch(2, 5, seed, 100);
  const Objective base = objective(model, batch);
  const std::int64_t valid = 2 * 5 - 1;
  if (expect_drops) EXPECT_GT(base.routing.back(), 0) << "the capacity should drop tokens in this test";
  model.parameters().zero_grads();
  model.reset_moe_stats();
  model.forward_backward(batch.ids, batch.targets, 1.0f / static_cast<float>(valid), Recompute::none);
  int skipped = 0, checked_moe = 0;
  for (std::size_t i = 0; i < model.parameters().size(); ++i) {
    Parameter& p = model.parameters()[i];
    SCOPED_TRACE(p.name);
    Tensor direction = Tensor::empty(p.shape);
    fill_normal(direction, 0.0f, 1.0f, seed, 1000 + i);
    if (p.name == "wte" || p.name == "lm_head.weight") {
      direction.slice(0, config.vocab_size, config.padded_vocab_size()).fill(0.0);
    }
    std::vector<double> u = testing::to_f64(direction), g = testing::to_f64(p.grad);
    const double analytic = testing::dot(g, u);
    Tensor saved = p.value.clone();
    // Central differences at two steps: a routing change that keeps every count (two tokens
    // swapping experts under a capacity) is invisible in `routing` but bends the objective, and
    // then the two steps disagree; such a point is skipped like a visible routing change.
    bool smooth = true;
    auto central = [&](double eps) {
      auto shifted = [&](double sign) {
        testing::set_shifted(p.value, saved, u, sign * eps);
        return objective(model, batch);
      };
      const Objective up = shifted(1), down = shifted(-1);
      if (up.routing != base.routing || down.routing != base.routing) smooth = false;
      return (up.value - down.value) / (2 * eps);
    };
    const double wide = central(1e-3), numeric = central(2.5e-4);
    p.value.copy_from(saved);
    if (!smooth || std::fabs(wide - numeric) > 2e-3 + 1e-2 * std::fabs(numeric)) {
      ++skipped;
      continue;
    }
    if (p.name.find(".moe.") != std::string::npos) ++checked_moe;
    EXPECT_NEAR(analytic, numeric, 2e-3 + 2e-2 * std::fabs(numeric))
        << "analytic " << analytic << " numeric " << numeric;
  }
  if (skipped <= 1) EXPECT_GE(checked_moe, 2);  // the router and the experts (one may have been skipped)
  return skipped;
}

// A base point where some token's scores nearly tie flips a choice under any shift; such a point
// is replaced by another (at most three), and every parameter checked at any of them must agree.
void check_gradients(const TransformerConfig& config, bool expect_drops) {
  const std::uint64_t seed = testing::fresh_seed();
  int skipped = 0;
  for (std::uint64_t attempt = 0; attempt < 3; ++attempt) {
    skipped = check_gradients_at(config, expect_drops, seed + attempt);
    if (skipped <= 1) break;
  }
  EXPECT_LE(skipped, 1) << "three base points in a row had routing decisions within a shift of a tie";
}

TEST(MoeModel, LlamaExpertsWithCapacityMatchFiniteDifferences) { check_gradients(moe_llama(), true); }
TEST(MoeModel, Gpt2SigmoidRouterMatchesFiniteDifferences) { check_gradients(moe_gpt2(), false); }

TEST(MoeModel, ParametersHoldExpertsByGlobalIndexAfterTheDenseOnes) {
  GptModel model(moe_llama(), {}, false);
  const Parameter& gate = model.parameters().find("blocks.0.moe.experts.gate.weight");
  EXPECT_EQ(gate.global_shape, (Shape{4, 12, 16}));
  EXPECT_EQ(model.parameters().find("blocks.1.moe.router.weight").shape, (Shape{4, 16}));
  EXPECT_EQ(model.parameters().find("blocks.1.moe.shared.down.weight").shape, (Shape{16, 12}));
  // Units: embeddings, block 0, its experts, block 1, its experts, head.
  std::vector<std::string> names;
  for (const ParamUnit& u : model.units()) names.push_back(u.name + (u.expert ? "*" : ""));
  EXPECT_EQ(names, (std::vector<std::string>{"embeddings", "blocks.0", "blocks.0.experts*", "blocks.1",
                                             "blocks.1.experts*", "head"}));
  EXPECT_THROW(model.parameters().find("blocks.0.mlp.gate.weight"), Error);
  GptModel dense_first(moe_gpt2(), {}, false);
  EXPECT_NO_THROW(dense_first.parameters().find("blocks.0.mlp.fc.weight"));
  EXPECT_NO_THROW(dense_first.parameters().find("blocks.1.moe.experts.fc.weight"));
  EXPECT_LT(model.active_parameters(), model.parameters().numel());
}

TEST(MoeModel, MicroBatchesAccumulateToTheWholeBatchAndRecomputeChangesNothing) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  for (const TransformerConfig& config : {moe_llama(), moe_gpt2()}) {
    MoeBatch whole = random_batch(4, 6, seed, 3);
    GptModel a(config), b(config);
    a.initialize(seed);
    b.initialize(seed);
    const float scale = 1.0f / 23.0f;
    a.parameters().zero_grads();
    a.reset_moe_stats();
    a.forward_backward(whole.ids, whole.targets, scale, Recompute::none);
    b.parameters().zero_grads();
    b.reset_moe_stats();
    b.forward_backward(whole.ids.slice(0, 0, 1), whole.targets.slice(0, 0, 1), scale, Recompute::none);
    b.forward_backward(whole.ids.slice(0, 1, 4), whole.targets.slice(0, 1, 4), scale, Recompute::none);
    testing::expect_close(b.parameters().flat_grads(), testing::to_f64(a.parameters().flat_grads()), 1e-6, 1e-4,
                          "accumulated gradients");
    ASSERT_EQ(a.moe_stats().size(), b.moe_stats().size());
    const std::int64_t E = config.moe.num_experts;
    for (std::size_t l = 0; l < a.moe_stats().size(); ++l) {
      const std::vector<double> ta = a.moe_stats()[l].host_totals(), tb = b.moe_stats()[l].host_totals();
      // Assignments per expert and drops equal; the router logits are float32 GEMM results whose
      // rounding depends on the batch shape, so the aux loss sum only nearly.
      EXPECT_EQ(std::vector<double>(ta.begin(), ta.begin() + E + 1),
                std::vector<double>(tb.begin(), tb.begin() + E + 1));
      EXPECT_NEAR(ta[E + 1], tb[E + 1], 1e-6 * ta[E + 1]);
    }
    const std::vector<double> none = testing::to_f64(a.parameters().flat_grads());
    for (Recompute mode : {Recompute::selective, Recompute::full}) {
      GptModel c(config);
      c.initialize(seed);
      c.parameters().zero_grads();
      c.forward_backward(whole.ids, whole.targets, scale, mode);
      EXPECT_EQ(testing::to_f64(c.parameters().flat_grads()), none) << choice_name(mode);
    }
    // Full recompute drops the expert activations after the forward (rebuilt before backward).
    GptModel sizes(config, {}, false);
    EXPECT_GT(sizes.activation_memory(4, 6, Recompute::none).saved_bytes,
              sizes.activation_memory(4, 6, Recompute::selective).saved_bytes);
    EXPECT_GT(sizes.activation_memory(4, 6, Recompute::selective).saved_bytes,
              sizes.activation_memory(4, 6, Recompute::full).saved_bytes);
  }
}

}  // namespace
}  // namespace myriad::nn
