// The OpenAI completions body: every field parsed as documented, every bad value refused naming
// its field, responses in the API's shape.
#include "myriad/serve/completion_api.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_helpers.h"

namespace myriad::serve {
namespace {

data::BpeTokenizer tiny_tokenizer() {
  return data::BpeTokenizer::train(
      "the cat sat on the mat. the dog sat on the log. "
      "the cat and the dog.",
      270);
}

TEST(CompletionApi, ParsesEveryField) {
  const data::BpeTokenizer tok = tiny_tokenizer();
  const ParsedCompletion p = parse_completion(
      R"({"model":"m","prompt":"the cat","max_tokens":5,"temperature":0.5,"top_p":0.9,"top_k":7,"seed":42,)"
      R"("stop":["x","y"],"stream":true,"logprobs":2,"n":1,"echo":false,"presence_penalty":0})",
      &tok);
  EXPECT_EQ(p.model, "m");
  EXPECT_TRUE(p.stream);
  std::vector<std::int32_t> want = tok.encode("the cat");
  want.insert(want.begin(), tok.eot_id());
  EXPECT_EQ(p.request.prompt, want);
  EXPECT_EQ(p.request.sampling.max_new_tokens, 5);
  EXPECT_FLOAT_EQ(p.request.sampling.temperature, 0.5f);
  EXPECT_FLOAT_EQ(p.request.sampling.top_p, 0.9f);
  EXPECT_EQ(p.request.sampling.top_k, 7);
  EXPECT_EQ(p.request.sampling.seed, 42u);
  EXPECT_EQ(p.request.stop, (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(p.request.logprobs, 2);
  EXPECT_EQ(p.request.sampling.stop_tokens, (std::vector<std::int32_t>{tok.eot_id()}));
}

TEST(CompletionApi, DefaultsFollowTheApi) {
  const ParsedCompletion p = parse_completion(R"({"prompt":[3,1,4]})", nullptr);
  EXPECT_EQ(p.request.prompt, (std::vector<std::int32_t>{3, 1, 4}));
  EXPECT_EQ(p.request.sampling.max_new_tokens, 16);
  EXPECT_FLOAT_EQ(p.request.sampling.temperature, 1.0f);
  EXPECT_FLOAT_EQ(p.request.sampling.top_p, 1.0f);
  EXPECT_EQ(p.request.sampling.top_k, 0);
  EXPECT_EQ(p.request.logprobs, -1);
  EXPECT_FALSE(p.stream);
}

TEST(CompletionApi, RefusesBadValuesNamingTheField) {
  const data::BpeTokenizer tok = tiny_tokenizer();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"{", "body"},
      {"[1]", "body"},
      {R"({"prompt":"a","bogus":1})", "body"},
      {R"({"max_tokens":3})", "prompt"},
      {R"({"prompt":[]})", "prompt"},
      {R"({"prompt":[1,-2]})", "prompt"},
      {R"({"prompt":["a","b"]})", "prompt"},
      {R"({"prompt":"a","max_tokens":-1})", "max_tokens"},
      {R"({"prompt":"a","max_tokens":2.5})", "max_tokens"},
      {R"({"prompt":"a","temperature":-0.1})", "temperature"},
      {R"({"prompt":"a","temperature":"hot"})", "temperature"},
      {R"({"prompt":"a","top_p":0})", "top_p"},
      {R"({"prompt":"a","top_p":1.5})", "top_p"},
      {R"({"prompt":"a","top_k":-3})", "top_k"},
      {R"({"prompt":"a","seed":"x"})", "seed"},
      {R"({"prompt":"a","stop":[1]})", "stop"},
      {R"({"prompt":"a","stop":["a","b","c","d","e"]})", "stop"},
      {R"({"prompt":"a","stream":1})", "stream"},
      {R"({"prompt":"a","logprobs":21})", "logprobs"},
      {R"({"prompt":"a","n":2})", "n"},
      {R"({"prompt":"a","echo":true})", "echo"},
      {R"({"prompt":"a","frequency_penalty":0.5})", "frequency_penalty"},
      {R"({"prompt":"a","model":3})", "model"},
  };
  for (const auto& [body, field] : cases) {
    try {
      parse_completion(body, &tok);
      ADD_FAILURE() << body << " was accepted";
    } catch (const Error& e) {
      EXPECT_EQ(error_field(e.message()), field) << body << " -> " << e.message();
    }
  }
  testing::expect_error_naming([] { parse_completion(R"({"prompt":"text"})", nullptr); }, {"prompt", "tokenizer"});
}

TEST(CompletionApi, RendersTheResponseAndChunks) {
  const data::BpeTokenizer tok = tiny_tokenizer();
  const CompletionIdentity who{"cmpl-1", 1700000000, "tiny"};
  std::vector<TokenEvent> events = {{.token = 5, .text = "a", .logprob = -0.5f, .top_logprobs = {{5, -0.5f}}},
                                    {.token = 6, .text = "\xC3", .logprob = -1.0f, .top_logprobs = {{6, -1.0f}}}};
  const auto j = nlohmann::json::parse(render_completion(who, events, FinishReason::length, 3, true, &tok));
  EXPECT_EQ(j["object"], "text_completion");
  EXPECT_EQ(j["model"], "tiny");
  EXPECT_EQ(j["choices"][0]["text"], "a\xEF\xBF\xBD") << "invalid UTF-8 is replaced";
  EXPECT_EQ(j["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(j["choices"][0]["token_ids"], nlohmann::json({5, 6}));
  EXPECT_EQ(j["choices"][0]["logprobs"]["token_logprobs"].size(), 2u);
  EXPECT_EQ(j["usage"]["prompt_tokens"], 3);
  EXPECT_EQ(j["usage"]["completion_tokens"], 2);
  EXPECT_EQ(j["usage"]["total_tokens"], 5);
  const std::string chunk = render_chunk(who, {events[0]}, FinishReason::none, false, &tok);
  ASSERT_EQ(chunk.rfind("data: ", 0), 0u);
  ASSERT_EQ(chunk.substr(chunk.size() - 2), "\n\n");
  const auto c = nlohmann::json::parse(chunk.substr(6));
  EXPECT_TRUE(c["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(c["choices"][0]["logprobs"].is_null());
  const auto e = nlohmann::json::parse(render_error("max_tokens: bad", "invalid_request_error", "max_tokens"));
  EXPECT_EQ(e["error"]["param"], "max_tokens");
}

TEST(CompletionApi, AServerErrorTellsTheClientItsIdAndLogsTheDetailOnly) {
  std::FILE* log = std::tmpfile();
  ASSERT_NE(log, nullptr);
  const std::string detail = "[rank 1] /srv/models/secret/step_00000042/rank_1.bin: chunk 7 fails authentication";
  const std::string message = internal_error_message("cmpl-42", detail, log);
  EXPECT_NE(message.find("cmpl-42"), std::string::npos);
  EXPECT_EQ(message.find("/srv"), std::string::npos) << message;
  EXPECT_EQ(message.find("rank"), std::string::npos) << message;
  std::rewind(log);
  char line[512] = {};
  ASSERT_NE(std::fgets(line, sizeof line, log), nullptr);
  EXPECT_NE(std::string(line).find("cmpl-42"), std::string::npos);
  EXPECT_NE(std::string(line).find(detail), std::string::npos);
  std::fclose(log);
}

}  // namespace
}  // namespace myriad::serve
