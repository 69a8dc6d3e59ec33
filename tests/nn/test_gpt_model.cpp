// GptModel wiring: directional finite-difference checks of every parameter's gradient (GPT-2,
// LLaMA and block-sparse attention), block-sparse keeping every block equal to dense, block-sparse
// generation (the forward re-run over the prefix), bit-identical gradients under every recompute mode, exact gradient
// accumulation over uneven micro-batches, and input errors.
#include <gtest/gtest.h>

#include <cmath>

#include "myriad/core/philox.h"
#include "myriad/nn/generate.h"
#include "myriad/nn/gpt_model.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad::nn {
namespace {

TransformerConfig tiny_gpt2() { return TransformerConfig::gpt2(13, 2, 2, 8, 8); }
TransformerConfig tiny_llama() { return TransformerConfig::llama(13, 2, 4, 2, 16, 8); }
// Block-sparse attention over blocks of 2 positions: the diagonal block and the first one (fixed),
// or with the per-head selection on top.
TransformerConfig tiny_block_sparse(double sparse_ratio) {
  TransformerConfig c = tiny_llama();
  c.attention.kind = AttentionKind::block_sparse;
  c.attention.block_size = 2;
  c.attention.fixed = {.local_blocks = 0, .global_blocks = 1};
  c.attention.sparse_ratio = sparse_ratio;
  c.attention.max_blocks = 1;
  return c;
}

struct Batch {
  Tensor ids, targets;
};

Batch random_batch(std::int64_t B, std::int64_t T, std::int32_t V, std::uint64_t seed, std::uint64_t stream) {
  Batch b{testing::random_ids({B, T}, V, seed, stream), testing::random_ids({B, T}, V, seed, stream + 1)};
  b.targets.data<std::int32_t>()[1] = GptModel::kIgnoreIndex;  // one ignored position
  return b;
}

double mean_loss(GptModel& model, const Batch& b) {
  LossSum l = model.forward_loss(b.ids, b.targets);
  return l.sum / static_cast<double>(l.tokens);
}

// For each parameter p: d/de L(p + e u) at e = 0 for a random direction u, by central
// differences (extrapolated from two steps), against grad . u. Float32 forward: ~1e-3 relative.
void check_gradients(const TransformerConfig& config) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  GptModel model(config);
  model.initialize(seed);
  // Larger weights than the 0.02 init make every path contribute visibly to the loss.
  for (Parameter& p : model.parameters().all()) {
    if (p.init == ParamInit::normal) fill_normal(p.value, 0.0f, 0.3f, seed, stable_name_hash(p.name) + 1);
  }
  Batch batch = random_batch(2, 5, static_cast<std::int32_t>(config.vocab_size), seed, 100);
  LossSum total = model.forward_loss(batch.ids, batch.targets);
  model.parameters().zero_grads();
  model.forward_backward(batch.ids, batch.targets, 1.0f / static_cast<float>(total.tokens), Recompute::none);
  for (std::size_t i = 0; i < model.parameters().size(); ++i) {
    Parameter& p = model.parameters()[i];
    SCOPED_TRACE(p.name);
    Tensor direction = Tensor::empty(p.shape);
    fill_normal(direction, 0.0f, 1.0f, seed, 1000 + i);
    if (p.name == "wte" || p.name == "lm_head.weight") {
      // Padded vocabulary rows are unused: no gradient, and no loss change along them.
      Tensor padded = direction.slice(0, config.vocab_size, config.padded_vocab_size());
      padded.fill(0.0);
      std::vector<double> pad_grad = testing::to_f64(p.grad.slice(0, config.vocab_size, config.padded_vocab_size()));
      for (double g : pad_grad) ASSERT_EQ(g, 0.0);
    }
    std::vector<double> u = testing::to_f64(direction), g = testing::to_f64(p.grad);
    double analytic = testing::dot(g, u);
    Tensor saved = p.value.clone();
    // Central differences at eps and eps / 2, extrapolated (Richardson): the eps^2 term (the third
    // derivative's) of one central difference cancels. With 0.3-std weights a direction can bend
    // sharply enough for that term alone to reach 2e-3 at eps = 1e-3 (seen once in ~500 seeds).
    auto central = [&](double eps) {
      auto shifted_loss = [&](double sign) {
        testing::set_shifted(p.value, saved, u, sign * eps);
        return mean_loss(model, batch);
      };
      return (shifted_loss(1) - shifted_loss(-1)) / (2 * eps);
    };
    const double numeric = (4 * central(5e-4) - central(1e-3)) / 3;
    p.value.copy_from(saved);
    EXPECT_NEAR(analytic, numeric, 2e-3 + 2e-2 * std::fabs(numeric))
        << "analytic " << analytic << " numeric " << numeric;
  }
}

TEST(GptModel, Gpt2GradientsMatchFiniteDifferences) { check_gradients(tiny_gpt2()); }
TEST(GptModel, LlamaGradientsMatchFiniteDifferences) { check_gradients(tiny_llama()); }
TEST(GptModel, BlockSparseGradientsMatchFiniteDifferences) { check_gradients(tiny_block_sparse(0.0)); }

TEST(GptModel, BlockSparseKeepingEveryBlockEqualsDense) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  TransformerConfig all = tiny_block_sparse(0.0);
  all.attention.fixed.local_blocks = 8;
  GptModel dense(tiny_llama()), sparse(all);
  dense.initialize(seed);
  sparse.initialize(seed);
  Batch batch = random_batch(2, 7, 13, seed, 3);
  for (GptModel* m : {&dense, &sparse}) {
    m->parameters().zero_grads();
    m->forward_backward(batch.ids, batch.targets, 0.1f, Recompute::none);
  }
  EXPECT_NEAR(sparse.forward_loss(batch.ids, batch.targets).sum, dense.forward_loss(batch.ids, batch.targets).sum,
              1e-5);
  testing::expect_close(sparse.parameters().flat_grads(), testing::to_f64(dense.parameters().flat_grads()), 1e-6, 1e-5,
                        "gradients");
  // What it kept: every causal block (4 query blocks of 2 per head, 4 heads, 2 sequences, 2 layers).
  const BlockSelectionStats& kept = sparse.attention_stats();
  EXPECT_GT(kept.query_blocks, 0);
  EXPECT_EQ(kept.kept_blocks, kept.causal_blocks);
}

TEST(GptModel, BlockSparseGenerationRerunsTheForward) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  GptModel model(tiny_block_sparse(0.5));
  model.initialize(seed);
  const std::vector<std::int32_t> prompt = {3, 1, 4};
  const std::vector<std::int32_t> out = generate(model, prompt, GenerateArgs{.max_new_tokens = 3, .temperature = 0});
  ASSERT_EQ(out.size(), 3u);
  // Greedy: each token is the argmax of the full forward's last row over the prefix so far.
  std::vector<std::int32_t> ids = prompt;
  for (std::int32_t token : out) {
    Tensor t = Tensor::empty({1, static_cast<std::int64_t>(ids.size())}, DType::i32);
    std::copy(ids.begin(), ids.end(), t.data<std::int32_t>());
    const Tensor logits = model.forward_logits(t);
    const float* last = logits.data<float>() + (static_cast<std::int64_t>(ids.size()) - 1) * 13;
    EXPECT_EQ(token, std::max_element(last, last + 13) - last);
    ids.push_back(token);
  }
  PagedKvCache cache = model.make_paged_kv_cache(4, 2);
  const std::vector<std::int32_t> table = {0};
  testing::expect_error_naming(
      [&] { model.decode({DecodeSequence{.tokens = {1}, .start = 0, .blocks = &table}}, cache); },
      {"decode", "block-sparse"});
}

std::vector<double> gradients_with(const TransformerConfig& config, Recompute mode, std::uint64_t seed,
                                   DType precision = DType::f32) {
  GptModel model(config);
  model.set_activation_precision(precision);
  model.initialize(seed);
  Batch batch = random_batch(3, 7, static_cast<std::int32_t>(config.vocab_size), seed, 7);
  model.parameters().zero_grads();
  model.forward_backward(batch.ids, batch.targets, 0.05f, mode);
  return testing::to_f64(model.parameters().flat_grads());
}

TEST(GptModel, RecomputeModesGiveIdenticalGradients) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  for (const TransformerConfig& config : {tiny_gpt2(), tiny_llama(), tiny_block_sparse(0.5)}) {
    std::vector<double> none = gradients_with(config, Recompute::none, seed);
    EXPECT_EQ(gradients_with(config, Recompute::selective, seed), none);
    EXPECT_EQ(gradients_with(config, Recompute::full, seed), none);
  }
  // Under mixed precision the recomputed norm outputs and MLP activation are 16-bit as the kept ones.
  for (const TransformerConfig& config : {tiny_gpt2(), tiny_llama()}) {
    std::vector<double> none = gradients_with(config, Recompute::none, seed, DType::bf16);
    EXPECT_EQ(gradients_with(config, Recompute::selective, seed, DType::bf16), none);
    EXPECT_EQ(gradients_with(config, Recompute::full, seed, DType::bf16), none);
  }
  GptModel model(tiny_gpt2());
  ActivationMemory none = model.activation_memory(4, 8, Recompute::none);
  ActivationMemory selective = model.activation_memory(4, 8, Recompute::selective);
  ActivationMemory full = model.activation_memory(4, 8, Recompute::full);
  EXPECT_GT(none.saved_bytes, selective.saved_bytes);
  EXPECT_GT(selective.saved_bytes, full.saved_bytes);
}

// Mixed precision keeps the GEMM inputs only GEMMs read (norm outputs, the MLP activation, the
// head's input), the GELU's pre-activation and the residual stream in the operand format: 2 bytes
// instead of 4 for (2 C + 2 F) values per token and block, C for the head and C per block boundary
// (and the pre-activation's gradient, F per token, in the scratch); a model with MoE layers keeps
// h2 (the router's input) in f32; FP8 keeps them all f32 (it quantises from f32).
TEST(GptModel, MixedPrecisionKeepsTheGemmInputsIn16Bits) {
  const std::int64_t B = 4, T = 8, N = B * T;
  const TransformerConfig dense = tiny_gpt2();
  const std::int64_t C = dense.n_embd, F = dense.ffn_hidden, L = dense.n_layer;
  GptModel f32_model(dense), bf16_model(dense);
  bf16_model.set_activation_precision(DType::bf16);
  const ActivationMemory wide = f32_model.activation_memory(B, T, Recompute::none);
  const ActivationMemory narrow = bf16_model.activation_memory(B, T, Recompute::none);
  const std::int64_t stream = (L + 1) * N * C * 2;  // the residual stream into and out of every block
  EXPECT_EQ(wide.saved_bytes - narrow.saved_bytes, L * N * (2 * C + 2 * F) * 2 + N * C * 2 + stream)
      << "and the head's input and the residual stream";
  EXPECT_EQ(wide.scratch_bytes - narrow.scratch_bytes, N * F * 2) << "the GELU pre-activation's gradient";
  // Selective recompute rebuilds h1, h2 and act in one shared set: the scratch shrinks instead (and
  // by the pre-activation's gradient); the pre-activation stays saved.
  const ActivationMemory wide_sel = f32_model.activation_memory(B, T, Recompute::selective);
  const ActivationMemory narrow_sel = bf16_model.activation_memory(B, T, Recompute::selective);
  EXPECT_EQ(wide_sel.saved_bytes - narrow_sel.saved_bytes, L * N * F * 2 + N * C * 2 + stream)
      << "the GELU pre-activations, the head's input, the stream";
  EXPECT_EQ(wide_sel.scratch_bytes - narrow_sel.scratch_bytes, N * (2 * C + 2 * F) * 2);

  TransformerConfig moe = tiny_gpt2();
  moe.moe.num_experts = 2;
  moe.moe.top_k = 1;
  moe.moe.every = 2;  // block 1 is an MoE block, block 0 dense
  GptModel moe_f32(moe), moe_bf16(moe);
  moe_bf16.set_activation_precision(DType::bf16);
  const std::int64_t moe_saving = moe_f32.activation_memory(B, T, Recompute::none).saved_bytes -
                                  moe_bf16.activation_memory(B, T, Recompute::none).saved_bytes;
  EXPECT_EQ(moe_saving, L * N * C * 2 + N * F * 2 * 2 + N * C * 2 + stream)
      << "h1 of both blocks, act and fc of the dense one, the head's input, the stream; h2 stays f32";

  // The model's buffers follow: a forward and backward on them, and the tensors' own dtypes.
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  bf16_model.initialize(seed);
  Batch batch = random_batch(B, T, static_cast<std::int32_t>(dense.vocab_size), seed, 3);
  bf16_model.parameters().zero_grads();
  bf16_model.forward_backward(batch.ids, batch.targets, 0.05f, Recompute::none);
  for (double g : testing::to_f64(bf16_model.parameters().flat_grads())) ASSERT_TRUE(std::isfinite(g));
  const std::vector<ActivationSlot> slots = block_activation_slots(dense, ModelSplit{}, B, T, DType::bf16);
  int sixteen = 0;
  for (const ActivationSlot& slot : slots) sixteen += slot.dtype == DType::bf16 ? 1 : 0;
  EXPECT_EQ(sixteen, 4) << "h1, h2, fc and act (head dim 4: the attention keeps f32 products)";

  // At head dim 64 the attention takes 16-bit products: its output (proj's input) is kept 16-bit
  // too, and the recompute modes still give identical gradients.
  const TransformerConfig wide_heads = TransformerConfig::gpt2(13, 2, 1, 64, 8);
  int sixteen_wide = 0;
  for (const ActivationSlot& slot : block_activation_slots(wide_heads, ModelSplit{}, B, T, DType::bf16)) {
    sixteen_wide += slot.dtype == DType::bf16 ? 1 : 0;
  }
  EXPECT_EQ(sixteen_wide, 6) << "h1, h2, fc, act, att and qkv (no RoPE: the attention rounds q, k, v anyway)";
  GptModel wide_f32(wide_heads), wide_bf16(wide_heads);
  wide_bf16.set_activation_precision(DType::bf16);
  const std::int64_t Cw = wide_heads.n_embd, Fw = wide_heads.ffn_hidden;
  EXPECT_EQ(wide_f32.activation_memory(B, T, Recompute::none).saved_bytes -
                wide_bf16.activation_memory(B, T, Recompute::none).saved_bytes,
            wide_heads.n_layer * N * (3 * Cw + 2 * Fw + wide_heads.qkv_width()) * 2 + N * Cw * 2 +
                (wide_heads.n_layer + 1) * N * Cw * 2);
  std::vector<double> none = gradients_with(wide_heads, Recompute::none, seed, DType::bf16);
  EXPECT_EQ(gradients_with(wide_heads, Recompute::selective, seed, DType::bf16), none);
  EXPECT_EQ(gradients_with(wide_heads, Recompute::full, seed, DType::bf16), none);
  // LLaMA at head dim 64: the rotated q, k too (RoPE writes them in the format for the attention).
  const TransformerConfig llama_wide = TransformerConfig::llama(13, 2, 1, 1, 64, 8);
  int sixteen_llama = 0;
  for (const ActivationSlot& slot : block_activation_slots(llama_wide, ModelSplit{}, B, T, DType::bf16)) {
    sixteen_llama += slot.dtype == DType::bf16 ? 1 : 0;
  }
  EXPECT_EQ(sixteen_llama, 8) << "h1, h2, act, att, q_rot, k_rot and SwiGLU's gate and up";
  std::vector<double> llama_none = gradients_with(llama_wide, Recompute::none, seed, DType::bf16);
  EXPECT_EQ(gradients_with(llama_wide, Recompute::selective, seed, DType::bf16), llama_none);
  EXPECT_EQ(gradients_with(llama_wide, Recompute::full, seed, DType::bf16), llama_none);
}

TEST(GptModel, AccumulationOverUnevenMicroBatchesEqualsOneBatch) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  TransformerConfig config = tiny_gpt2();
  Batch whole = random_batch(4, 6, 13, seed, 3);
  // Mark many positions of the first two rows ignored: micro-batches have different token counts.
  for (int i = 0; i < 9; ++i) whole.targets.data<std::int32_t>()[i] = GptModel::kIgnoreIndex;
  GptModel a(config), b(config);
  a.initialize(seed);
  b.initialize(seed);
  LossSum total = a.forward_loss(whole.ids, whole.targets);
  const float scale = 1.0f / static_cast<float>(total.tokens);
  a.parameters().zero_grads();
  a.forward_backward(whole.ids, whole.targets, scale, Recompute::none);
  b.parameters().zero_grads();
  LossSum first = b.forward_backward(whole.ids.slice(0, 0, 2), whole.targets.slice(0, 0, 2), scale, Recompute::none);
  LossSum second = b.forward_backward(whole.ids.slice(0, 2, 4), whole.targets.slice(0, 2, 4), scale, Recompute::none);
  EXPECT_EQ(first.tokens + second.tokens, total.tokens);
  EXPECT_NEAR(first.sum + second.sum, total.sum, 1e-5 * total.sum);
  testing::expect_close(b.parameters().flat_grads(), testing::to_f64(a.parameters().flat_grads()), 1e-6, 1e-4,
                        "accumulated gradients");
}

TEST(GptModel, InitialisationDependsOnNameAndSeedOnly) {
  GptModel a(tiny_gpt2()), b(tiny_gpt2());
  a.initialize(5);
  b.initialize(5);
  EXPECT_EQ(testing::to_f64(a.parameters().flat_values()), testing::to_f64(b.parameters().flat_values()));
  b.initialize(6);
  EXPECT_NE(testing::to_f64(a.parameters().flat_values()), testing::to_f64(b.parameters().flat_values()));
  // Vocabulary padded to a multiple of 64.
  EXPECT_EQ(a.parameters().find("wte").shape, (Shape{64, 8}));
}

TEST(GptModel, BadInputsNameTheProblem) {
  GptModel model(tiny_gpt2());
  model.initialize(1);
  Tensor long_ids = Tensor::zeros({1, 9}, DType::i32);
  try {
    model.forward_loss(long_ids, Tensor::zeros({1, 9}, DType::i32));
    FAIL() << "T > context_length accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("context_length 8"), std::string::npos) << e.what();
  }
  Tensor bad = Tensor::full({1, 4}, 13, DType::i32);
  EXPECT_THROW(model.forward_loss(bad, Tensor::zeros({1, 4}, DType::i32)), Error);
  EXPECT_THROW(TransformerConfig::gpt2(13, 2, 3, 8, 8).validate(), Error);
}

}  // namespace
}  // namespace myriad::nn

namespace myriad::nn {
namespace {

// A LLaMA-style MoE (4 experts, top 2, a shared expert, dropless: decoding routes each token
// alone, so no capacity can bind there).
TransformerConfig tiny_moe() {
  TransformerConfig c = tiny_llama();
  c.moe.num_experts = 4;
  c.moe.top_k = 2;
  c.moe.shared_experts = 1;
  return c;
}

// The paged decode must give each sequence the logits of its full forward at every position, with
// the sequences batched in one step, their prompts in chunks, and their blocks scattered.
TEST(GptModelDecode, PagedBatchedDecodeMatchesFullForward) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  for (const TransformerConfig& config : {tiny_gpt2(), tiny_llama(), tiny_moe()}) {
    GptModel model(config);
    model.initialize(seed);
    constexpr std::int64_t kSeqs = 3, kT = 8;
    Tensor ids = testing::random_ids({kSeqs, kT}, 13, seed, 4);
    Tensor full = model.forward_logits(ids);  // (3, 8, V)
    // Blocks of 3 positions, handed out interleaved: sequence s owns blocks s, s + 3, s + 6.
    PagedKvCache cache = model.make_paged_kv_cache(3, 9);
    std::vector<std::vector<std::int32_t>> tables(kSeqs);
    for (std::int32_t b = 0; b < 9; ++b) tables[b % kSeqs].push_back(b);
    // Prompts of 1, 3 and 5 tokens in one step, then one token per sequence per step.
    std::vector<std::int64_t> done = {0, 0, 0};
    const std::vector<std::int64_t> prompt = {1, 3, 5};
    auto token = [&](std::int64_t s, std::int64_t t) { return ids.data<std::int32_t>()[s * kT + t]; };
    for (int round = 0; done[0] < kT; ++round) {
      std::vector<DecodeSequence> step;
      std::vector<std::int64_t> which;
      for (std::int64_t s = 0; s < kSeqs; ++s) {
        const std::int64_t n = round == 0 ? prompt[s] : 1;
        if (done[s] + n > kT) continue;
        DecodeSequence seq{.start = done[s], .blocks = &tables[s]};
        for (std::int64_t t = done[s]; t < done[s] + n; ++t) seq.tokens.push_back(token(s, t));
        step.push_back(seq);
        done[s] += n;
        which.push_back(s);
      }
      const Tensor logits = model.decode(step, cache);  // (sequences in the step, V)
      ASSERT_EQ(logits.size(0), static_cast<std::int64_t>(step.size()));
      for (std::size_t i = 0; i < step.size(); ++i) {
        const std::int64_t s = which[i], t = done[s] - 1;
        testing::expect_close(logits.select(0, static_cast<std::int64_t>(i)),
                              testing::to_f64(full.select(0, s).select(0, t)), 1e-5, 1e-4,
                              "sequence " + std::to_string(s) + " position " + std::to_string(t));
      }
    }
  }
}

TEST(GptModelDecode, RefusesPositionsBeyondTheBlockTable) {
  GptModel model(tiny_gpt2());
  model.initialize(1);
  PagedKvCache cache = model.make_paged_kv_cache(2, 4);
  const std::vector<std::int32_t> table = {3};
  testing::expect_error_naming(
      [&] {
        model.decode({DecodeSequence{.tokens = {1, 2, 3}, .start = 0, .blocks = &table}}, cache);
      },
      {"decode", "KV blocks"});
  testing::expect_error_naming(
      [&] { model.decode({DecodeSequence{.tokens = {1}, .start = 8, .blocks = &table}}, cache); },
      {"decode", "context"});
}

TEST(KvBlockPool, HandsOutEachBlockOnceAndTakesItBack) {
  KvBlockPool pool(4);
  std::vector<std::int32_t> a, b;
  pool.allocate(3, a);
  EXPECT_EQ(a, (std::vector<std::int32_t>{0, 1, 2}));
  EXPECT_EQ(pool.free_blocks(), 1);
  testing::expect_error_naming([&] { pool.allocate(2, b); }, {"2 blocks asked for", "1 free"});
  pool.release(a);
  EXPECT_TRUE(a.empty());
  pool.allocate(2, b);
  EXPECT_EQ(b, (std::vector<std::int32_t>{0, 1}));
  std::vector<std::int32_t> twice = {0};
  pool.release(b);
  testing::expect_error_naming([&] { pool.release(twice); }, {"block 0", "not in use"});
}

}  // namespace
}  // namespace myriad::nn
