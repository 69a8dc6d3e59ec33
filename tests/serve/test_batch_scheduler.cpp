// BatchScheduler: continuous batching gives each request what nn::generate gives it alone —
// greedy and seeded sampling, with preemption, chunked prompts and other requests in the batch.
#include "myriad/serve/batch_scheduler.h"

#include <gtest/gtest.h>

#include "myriad/nn/generate.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad::serve {
namespace {

// Runs the scheduler until nothing is queued or running; returns the tokens of each stream.
std::vector<std::vector<std::int32_t>> run_to_completion(BatchScheduler& scheduler,
                                                         const std::vector<std::shared_ptr<RequestStream>>& streams) {
  for (int guard = 0; !scheduler.idle() && guard < 100000; ++guard) scheduler.step();
  std::vector<std::vector<std::int32_t>> out;
  for (const auto& stream : streams) {
    std::vector<TokenEvent> events;
    EXPECT_TRUE(stream->wait_for(std::chrono::milliseconds(0), events)) << "a request did not finish";
    std::vector<std::int32_t> ids;
    for (const TokenEvent& e : events)
      if (e.token >= 0) ids.push_back(e.token);
    out.push_back(ids);
  }
  return out;
}

CompletionRequest request(std::vector<std::int32_t> prompt, std::int64_t max_tokens, float temperature,
                          std::uint64_t seed) {
  CompletionRequest r;
  r.prompt = std::move(prompt);
  r.sampling = nn::GenerateArgs{.max_new_tokens = max_tokens, .temperature = temperature, .top_k = 0, .seed = seed};
  return r;
}

std::vector<std::int32_t> prompt_of(std::int64_t length, std::uint64_t seed, std::int32_t vocab) {
  const Tensor ids = testing::random_ids({1, length}, vocab, seed, static_cast<std::uint64_t>(length));
  return {ids.data<std::int32_t>(), ids.data<std::int32_t>() + length};
}

struct Case {
  const char* name;
  nn::TransformerConfig config;
};

class BatchSchedulerTest : public ::testing::TestWithParam<Case> {};

// Many requests of different prompt lengths at once, prompts chunked by a small token budget:
// each request's greedy tokens equal nn::generate on the model alone.
TEST_P(BatchSchedulerTest, GreedyTokensEqualGenerateAlone) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  nn::GptModel model(GetParam().config);
  model.initialize(seed);
  BatchScheduler scheduler(model, nullptr, SchedulerOptions{.block_size = 4, .max_batch_tokens = 7});
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<CompletionRequest> requests;
  for (std::int64_t length : {1, 3, 9, 14, 5, 2}) {
    requests.push_back(request(prompt_of(length, seed, 29), 8, 0.0f, 0));
    streams.push_back(std::make_shared<RequestStream>());
    ASSERT_EQ(scheduler.submit(requests.back(), streams.back()), BatchScheduler::Admission::accepted);
  }
  const auto got = run_to_completion(scheduler, streams);
  for (std::size_t i = 0; i < requests.size(); ++i) {
    EXPECT_EQ(got[i], nn::generate(model, requests[i].prompt, requests[i].sampling)) << "request " << i;
    EXPECT_EQ(streams[i]->reason(), FinishReason::length);
  }
  EXPECT_EQ(scheduler.free_blocks(), scheduler.options().num_blocks) << "blocks leaked";
}

// A seeded request draws the same tokens alone and among others (and as nn::generate does).
TEST_P(BatchSchedulerTest, SeededSamplingDoesNotDependOnTheBatch) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  nn::GptModel model(GetParam().config);
  model.initialize(seed);
  CompletionRequest mine = request(prompt_of(4, seed, 29), 12, 1.3f, seed + 1);
  mine.sampling.top_p = 0.9f;
  mine.sampling.top_k = 20;
  auto alone = [&] {
    BatchScheduler scheduler(model, nullptr, SchedulerOptions{.block_size = 4});
    auto stream = std::make_shared<RequestStream>();
    scheduler.submit(mine, stream);
    return run_to_completion(scheduler, {stream})[0];
  }();
  BatchScheduler scheduler(model, nullptr, SchedulerOptions{.block_size = 4, .max_batch_tokens = 11});
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int other = 0; other < 5; ++other) {
    streams.push_back(std::make_shared<RequestStream>());
    scheduler.submit(request(prompt_of(2 + other, seed + other, 29), 3 + other, 0.7f, other), streams.back());
    if (other == 2) {
      streams.push_back(std::make_shared<RequestStream>());
      scheduler.submit(mine, streams.back());
    }
  }
  const auto together = run_to_completion(scheduler, streams)[3];
  EXPECT_EQ(together, alone);
  EXPECT_EQ(alone, nn::generate(model, mine.prompt, mine.sampling));
  EXPECT_EQ(alone.size(), 12u);
}

// Too few KV blocks for every request at once: the youngest are preempted and recomputed, and
// every request still gets exactly its tokens.
TEST_P(BatchSchedulerTest, PreemptedRequestsAreRecomputedToTheSameTokens) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  nn::GptModel model(GetParam().config);
  model.initialize(seed);
  // A context of 32 positions needs 8 blocks of 4: 10 blocks hold one long request and a bit.
  BatchScheduler scheduler(model, nullptr, SchedulerOptions{.block_size = 4, .num_blocks = 10});
  std::vector<std::shared_ptr<RequestStream>> streams;
  std::vector<CompletionRequest> requests;
  for (int i = 0; i < 4; ++i) {
    requests.push_back(request(prompt_of(6 + i, seed + i, 29), 14, i % 2 == 0 ? 0.0f : 0.9f, seed + i));
    streams.push_back(std::make_shared<RequestStream>());
    scheduler.submit(requests.back(), streams.back());
  }
  const auto got = run_to_completion(scheduler, streams);
  EXPECT_GT(scheduler.preemptions(), 0) << "the test meant to run out of blocks";
  for (std::size_t i = 0; i < requests.size(); ++i)
    EXPECT_EQ(got[i], nn::generate(model, requests[i].prompt, requests[i].sampling)) << "request " << i;
  EXPECT_EQ(scheduler.free_blocks(), 10);
}

INSTANTIATE_TEST_SUITE_P(Models, BatchSchedulerTest,
                         ::testing::Values(Case{"gpt2", nn::TransformerConfig::gpt2(29, 2, 2, 16, 32)},
                                           Case{"llama", nn::TransformerConfig::llama(29, 2, 4, 2, 16, 32)},
                                           Case{"moe",
                                                [] {
                                                  nn::TransformerConfig c =
                                                      nn::TransformerConfig::llama(29, 2, 4, 2, 16, 32);
                                                  c.moe.num_experts = 4;
                                                  c.moe.top_k = 2;
                                                  c.moe.shared_experts = 1;
                                                  return c;
                                                }()}),
                         [](const auto& info) { return std::string(info.param.name); });

TEST(BatchScheduler, CancelledRequestsFreeTheirBlocks) {
  nn::GptModel model(nn::TransformerConfig::gpt2(29, 2, 2, 16, 32));
  model.initialize(3);
  BatchScheduler scheduler(model, nullptr, SchedulerOptions{.block_size = 4, .num_blocks = 16});
  auto stream = std::make_shared<RequestStream>();
  scheduler.submit(request(prompt_of(10, 3, 29), 20, 0.0f, 0), stream);
  scheduler.step();
  scheduler.step();
  EXPECT_LT(scheduler.free_blocks(), 16);
  stream->cancel();
  scheduler.step();
  EXPECT_EQ(scheduler.free_blocks(), 16);
  EXPECT_EQ(stream->reason(), FinishReason::cancelled);
  EXPECT_TRUE(scheduler.idle());
}

TEST(BatchScheduler, RefusesBeyondTheQueueAndWhileDraining) {
  nn::GptModel model(nn::TransformerConfig::gpt2(29, 2, 2, 16, 32));
  model.initialize(3);
  BatchScheduler scheduler(model, nullptr, SchedulerOptions{.queue_limit = 2});
  auto submit = [&] { return scheduler.submit(request({1, 2}, 2, 0.0f, 0), std::make_shared<RequestStream>()); };
  EXPECT_EQ(submit(), BatchScheduler::Admission::accepted);
  EXPECT_EQ(submit(), BatchScheduler::Admission::accepted);
  EXPECT_EQ(submit(), BatchScheduler::Admission::queue_full);
  scheduler.step();  // both admitted: the queue has room again
  EXPECT_EQ(submit(), BatchScheduler::Admission::accepted);
  scheduler.drain();
  EXPECT_EQ(submit(), BatchScheduler::Admission::draining);
  for (int guard = 0; !scheduler.idle() && guard < 1000; ++guard) scheduler.step();
  EXPECT_TRUE(scheduler.idle());
}

// A model vocabulary padded above its tokenizer's: the padding ids are never drawn (decoding them
// would fail), whatever the sampling.
TEST(BatchScheduler, NeverDrawsIdsTheTokenizerLacks) {
  const data::BpeTokenizer tok = data::BpeTokenizer::train("the cat sat on the mat. the dog sat on the log.", 262);
  ASSERT_LT(tok.vocab_size(), 290);
  nn::GptModel model(nn::TransformerConfig::gpt2(320, 2, 2, 16, 64));
  model.initialize(9);
  BatchScheduler scheduler(model, &tok, SchedulerOptions{.block_size = 8});
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < 4; ++i) {
    streams.push_back(std::make_shared<RequestStream>());
    scheduler.submit(request({1, 2, 3}, 40, 2.0f, static_cast<std::uint64_t>(i)), streams.back());
  }
  for (const auto& ids : run_to_completion(scheduler, streams)) {
    EXPECT_FALSE(ids.empty());
    for (std::int32_t id : ids) EXPECT_LT(id, tok.vocab_size());
  }
  for (const auto& stream : streams) EXPECT_NE(stream->reason(), FinishReason::error) << stream->error();
}

TEST(BatchScheduler, RefusesBadRequestsNamingTheField) {
  nn::GptModel model(nn::TransformerConfig::gpt2(29, 2, 2, 16, 32));
  model.initialize(3);
  BatchScheduler scheduler(model, nullptr, SchedulerOptions{});
  auto stream = std::make_shared<RequestStream>();
  testing::expect_error_naming([&] { scheduler.submit(request(prompt_of(33, 1, 29), 1, 0.0f, 0), stream); },
                               {"prompt", "33 tokens", "context of 32"});
  testing::expect_error_naming(
      [&] {
        scheduler.submit(request({1, 29}, 1, 0.0f, 0), stream);
      },
      {"prompt", "token id 29"});
  testing::expect_error_naming([&] { scheduler.submit(request({}, 1, 0.0f, 0), stream); }, {"prompt"});
  CompletionRequest with_stop = request({1}, 1, 0.0f, 0);
  with_stop.stop = {"x"};
  testing::expect_error_naming([&] { scheduler.submit(with_stop, stream); }, {"stop", "tokenizer"});
  testing::expect_error_naming(
      [&] { BatchScheduler tiny(model, nullptr, SchedulerOptions{.block_size = 4, .num_blocks = 7}); },
      {"7 KV blocks", "32 positions"});
}

}  // namespace
}  // namespace myriad::serve
