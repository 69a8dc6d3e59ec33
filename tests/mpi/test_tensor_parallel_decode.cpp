// Tensor-parallel decoding under mpiexec (tp = world size): GptModel::decode on a model split over
// the group (each rank its heads, MLP columns, vocabulary rows and key/value cache) returns, on
// every rank, the logits of the whole model decoding the same steps — prompts in chunks, several
// sequences per step, scattered KV blocks — for a GPT-2-style model (tied head, learned
// positions), a LLaMA-style one (RoPE, grouped-query attention, untied head) and an MoE one, at 2
// and 4 ranks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>

#include "mpi_test_support.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/nn/paged_kv_cache.h"
#include "myriad/parallel/tensor_parallel_regions.h"

namespace myriad::distributed {
namespace {

using nn::DecodeSequence;
using nn::GptModel;
using nn::TransformerConfig;

// Head counts that split over 2 and 4 ranks alike.
std::vector<TransformerConfig> configs() {
  TransformerConfig gpt2 = TransformerConfig::gpt2(50, 2, 8, 32, 16);
  TransformerConfig llama = TransformerConfig::llama(50, 2, 8, 4, 32, 16);
  TransformerConfig moe = llama;
  moe.moe.num_experts = 4;
  moe.moe.top_k = 2;
  moe.moe.shared_experts = 1;
  return {gpt2, llama, moe};
}

// The seed rank 0 drew, on every rank.
std::uint64_t shared_seed(Communicator& comm) {
  Tensor seed = Tensor::empty({1}, DType::i64);
  seed.data<std::int64_t>()[0] = static_cast<std::int64_t>(std::random_device{}() & 0x7fffffff);
  comm.broadcast_async(seed, 0)->wait();
  return static_cast<std::uint64_t>(seed.data<std::int64_t>()[0]);
}

TEST(DecodeTensorParallel, EveryRankGetsTheWholeModelsLogits) {
  auto tp = myriad::testing::make_world("tp");
  const std::uint64_t seed = shared_seed(*tp);
  SCOPED_TRACE("seed " + std::to_string(seed) + ", tp " + std::to_string(tp->size()));
  for (const TransformerConfig& config : configs()) {
    SCOPED_TRACE(config.moe.num_experts > 0 ? "moe" : config.positions == nn::PositionKind::rope ? "llama" : "gpt2");
    parallel::TensorParallelRegions regions(*tp, /*sequence_parallel=*/false, config);
    GptModel split(config, nn::ModelSplit{.tp = &regions});
    GptModel whole(config);
    split.initialize(seed);  // drawn by global index: the same values, split or not
    whole.initialize(seed);
    if (tp->size() > 1) ASSERT_LT(split.parameters().numel(), whole.parameters().numel());
    nn::PagedKvCache split_cache = split.make_paged_kv_cache(3, 12), whole_cache = whole.make_paged_kv_cache(3, 12);
    ASSERT_EQ(split_cache.k[0].size(1) * tp->size(), whole_cache.k[0].size(1));  // its own key/value heads
    // Three sequences with interleaved blocks; prompts of 2, 5 and 7 tokens, fed in chunks of at
    // most 4, then one drawn (here: fixed) token per step.
    std::vector<std::vector<std::int32_t>> tables(3);
    for (std::int32_t b = 0; b < 12; ++b) tables[b % 3].push_back(b);
    std::mt19937 draw(static_cast<std::uint32_t>(seed));
    std::vector<std::vector<std::int32_t>> tokens(3);
    for (int s = 0; s < 3; ++s)
      for (int t = 0; t < 10; ++t) tokens[s].push_back(static_cast<std::int32_t>(draw() % config.vocab_size));
    const std::vector<std::int64_t> prompt = {2, 5, 7};
    std::vector<std::int64_t> done = {0, 0, 0};
    for (int round = 0; round < 8; ++round) {
      std::vector<DecodeSequence> step;
      for (int s = 0; s < 3; ++s) {
        const std::int64_t n = done[s] < prompt[s] ? std::min<std::int64_t>(prompt[s] - done[s], 4) : 1;
        if (done[s] + n > 10) continue;
        DecodeSequence seq{.start = done[s], .blocks = &tables[s]};
        seq.tokens.assign(tokens[s].begin() + done[s], tokens[s].begin() + done[s] + n);
        step.push_back(seq);
        done[s] += n;
      }
      if (step.empty()) break;
      const Tensor mine = split.decode(step, split_cache), expected = whole.decode(step, whole_cache);
      ASSERT_EQ(mine.shape(), expected.shape());
      double worst = 0.0;
      for (std::int64_t i = 0; i < mine.numel(); ++i) {
        const double e = expected.data<float>()[i];
        worst = std::max(worst, std::abs(mine.data<float>()[i] - e) / (1.0 + std::abs(e)));
      }
      EXPECT_LT(worst, 1e-5) << "round " << round << " on rank " << tp->rank();
    }
  }
}

TEST(DecodeTensorParallel, SequenceParallelRegionsAreRefused) {
  auto tp = myriad::testing::make_world("tp");
  if (tp->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  const TransformerConfig config = configs()[0];
  parallel::TensorParallelRegions regions(*tp, /*sequence_parallel=*/true, config);
  GptModel split(config, nn::ModelSplit{.tp = &regions});
  nn::PagedKvCache cache = split.make_paged_kv_cache(4, 2);
  std::vector<std::int32_t> table = {0};
  try {
    split.decode({DecodeSequence{.tokens = {1}, .start = 0, .blocks = &table}}, cache);
    ADD_FAILURE() << "decode under sequence parallelism ran";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("sequence parallelism"), std::string::npos) << e.message();
  }
}

}  // namespace
}  // namespace myriad::distributed
