// CompletionServer end to end in one process: a real HTTP client against the routes — answers,
// refusals with their statuses, streaming, and a departed streaming client's blocks freed.
#include "myriad/serve/completion_server.h"

#include <gtest/gtest.h>
#include <httplib.h>

#include <nlohmann/json.hpp>
#include <thread>

#include "myriad/nn/generate.h"

namespace myriad::serve {
namespace {

using nlohmann::json;

class CompletionServerTest : public ::testing::Test {
 protected:
  void start(SchedulerOptions options, bool run_engine = true) {
    model_ = std::make_unique<nn::GptModel>(nn::TransformerConfig::gpt2(29, 2, 2, 16, 1024));
    model_->initialize(5);
    scheduler_ = std::make_unique<BatchScheduler>(*model_, nullptr, options, &metrics_);
    server_ = std::make_unique<CompletionServer>(*scheduler_, nullptr, metrics_,
                                                 ServerOptions{.port = 0, .http_threads = 8, .model_name = "tiny"});
    port_ = server_->bind();
    http_ = std::thread([&] { server_->listen(); });
    if (run_engine) start_engine();
  }
  void start_engine() {
    engine_ = std::thread([&] { scheduler_->run(); });
  }
  void TearDown() override {
    if (scheduler_) scheduler_->stop();
    if (engine_.joinable()) engine_.join();
    if (server_) server_->stop();
    if (http_.joinable()) http_.join();
  }
  httplib::Client client() const {
    httplib::Client c("127.0.0.1", port_);
    c.set_read_timeout(30, 0);
    return c;
  }
  httplib::Result post(const std::string& body) const {
    return client().Post("/v1/completions", body, "application/json");
  }

  ServeMetrics metrics_;
  std::unique_ptr<nn::GptModel> model_;
  std::unique_ptr<BatchScheduler> scheduler_;
  std::unique_ptr<CompletionServer> server_;
  std::thread engine_, http_;
  int port_ = 0;
};

TEST_F(CompletionServerTest, AnswersACompletionAsGenerateDoes) {
  start(SchedulerOptions{.block_size = 8});
  const auto res = post(R"({"model":"tiny","prompt":[3,1,4,1,5],"max_tokens":6,"temperature":0})");
  ASSERT_TRUE(res) << httplib::to_string(res.error());
  ASSERT_EQ(res->status, 200) << res->body;
  const json j = json::parse(res->body);
  const std::vector<std::int32_t> want =
      nn::generate(*model_, {3, 1, 4, 1, 5}, nn::GenerateArgs{.max_new_tokens = 6, .temperature = 0});
  EXPECT_EQ(j["choices"][0]["token_ids"].get<std::vector<std::int32_t>>(), want);
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(j["usage"]["completion_tokens"], 6);
}

TEST_F(CompletionServerTest, StreamsServerSentEventsEndingInDone) {
  start(SchedulerOptions{.block_size = 8});
  std::string body;
  httplib::Client c = client();
  const auto res =
      c.Post("/v1/completions", R"({"prompt":[7,7],"max_tokens":5,"temperature":0,"stream":true})", "application/json");
  ASSERT_TRUE(res);
  ASSERT_EQ(res->status, 200);
  EXPECT_EQ(res->get_header_value("Content-Type"), "text/event-stream");
  std::vector<std::int32_t> ids;
  std::string last_reason;
  std::size_t at = 0;
  bool done = false;
  while ((at = res->body.find("data: ", at)) != std::string::npos) {
    const std::size_t end = res->body.find("\n\n", at);
    const std::string data = res->body.substr(at + 6, end - at - 6);
    at = end;
    if (data == "[DONE]") {
      done = true;
      break;
    }
    const json chunk = json::parse(data);
    for (const auto& id : chunk["choices"][0]["token_ids"]) ids.push_back(id.get<std::int32_t>());
    if (!chunk["choices"][0]["finish_reason"].is_null()) last_reason = chunk["choices"][0]["finish_reason"];
  }
  EXPECT_TRUE(done);
  EXPECT_EQ(last_reason, "length");
  EXPECT_EQ(ids, nn::generate(*model_, {7, 7}, nn::GenerateArgs{.max_new_tokens = 5, .temperature = 0}));
}

TEST_F(CompletionServerTest, RefusesWithTheApisStatuses) {
  start(SchedulerOptions{.block_size = 8});
  auto error_of = [&](const std::string& body, int status) {
    const auto res = post(body);
    EXPECT_TRUE(res);
    if (!res) return json();
    EXPECT_EQ(res->status, status) << body << " -> " << res->body;
    return json::parse(res->body)["error"];
  };
  EXPECT_EQ(error_of(R"({"prompt":[1],"max_tokens":-4})", 400)["param"], "max_tokens");
  EXPECT_EQ(error_of(R"({"prompt":[1],"color":"red"})", 400)["param"], "body");
  EXPECT_EQ(error_of("not json", 400)["param"], "body");
  EXPECT_EQ(error_of(R"({"prompt":[1,2,99]})", 400)["param"], "prompt");
  std::string long_prompt = R"({"prompt":[1)";
  for (int i = 0; i < 1024; ++i) long_prompt += ",1";
  EXPECT_EQ(error_of(long_prompt + "]}", 400)["param"], "prompt") << "1025 tokens in a context of 1024";
  EXPECT_EQ(error_of(R"({"prompt":"text"})", 400)["param"], "prompt") << "no tokenizer: ids only";
  EXPECT_EQ(error_of(R"({"model":"other","prompt":[1]})", 404)["param"], "model");
  httplib::Client c = client();
  EXPECT_EQ(c.Get("/nowhere")->status, 404);
  EXPECT_EQ(c.Get("/health")->status, 200);
  EXPECT_EQ(c.Get("/ready")->status, 200);
  const json models = json::parse(c.Get("/v1/models")->body);
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  const std::string metrics = c.Get("/metrics")->body;
  EXPECT_NE(metrics.find("myriad_requests_total{status=\"400\"} 6"), std::string::npos) << metrics;
  EXPECT_NE(metrics.find("myriad_time_to_first_token_seconds_bucket{le=\"+Inf\"}"), std::string::npos);
}

TEST_F(CompletionServerTest, AFullQueueAnswers429WithRetryAfterAndReadyTurnsFalse) {
  start(SchedulerOptions{.block_size = 8, .queue_limit = 1}, /*run_engine=*/false);
  std::thread first([&] {
    const auto res = post(R"({"prompt":[1],"max_tokens":2})");
    EXPECT_TRUE(res && res->status == 200);
  });
  for (int i = 0; i < 3000 && scheduler_->queued() == 0; ++i) {  // up to 30 s on a loaded host
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_EQ(scheduler_->queued(), 1);
  const auto refused = post(R"({"prompt":[1],"max_tokens":2})");
  ASSERT_TRUE(refused);
  EXPECT_EQ(refused->status, 429);
  EXPECT_EQ(refused->get_header_value("Retry-After"), "1");
  EXPECT_EQ(client().Get("/ready")->status, 503);
  start_engine();
  first.join();
  EXPECT_EQ(client().Get("/ready")->status, 200);
  scheduler_->drain();
  const auto draining = post(R"({"prompt":[1],"max_tokens":2})");
  EXPECT_EQ(draining->status, 503);
  EXPECT_EQ(client().Get("/ready")->status, 503);
}

TEST_F(CompletionServerTest, AStreamingClientThatLeavesFreesItsBlocks) {
  start(SchedulerOptions{.block_size = 16, .num_blocks = 64});
  httplib::Client c = client();
  int chunks = 0;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = R"({"prompt":[1,2,3],"max_tokens":1000,"temperature":0,"stream":true})";
  req.set_header("Content-Type", "application/json");
  req.content_receiver = [&](const char*, std::size_t, std::uint64_t, std::uint64_t) { return ++chunks < 2; };
  c.send(req);  // the receiver's false closes the connection after the first chunk
  EXPECT_GE(chunks, 1);
  bool freed = false;
  for (int i = 0; i < 500 && !freed; ++i) {
    freed = scheduler_->idle() && scheduler_->free_blocks() == 64;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  EXPECT_TRUE(freed) << "running " << scheduler_->running() << ", free blocks " << scheduler_->free_blocks();
  const std::string text = metrics_.render({});
  const std::size_t at = text.find("\nmyriad_generated_tokens_total ");
  ASSERT_NE(at, std::string::npos);
  EXPECT_LT(std::stoll(text.substr(at + 31)), 1000) << "the request was cancelled, not run to its end";
}

}  // namespace
}  // namespace myriad::serve
