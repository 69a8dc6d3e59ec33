// OpenAI completions request parsing and response rendering (serve/completion_api.h).
#include "myriad/serve/completion_api.h"

#include <limits>
#include <random>
#include <nlohmann/json.hpp>
#include <set>

#include "myriad/core/error.h"

namespace myriad::serve {

using nlohmann::json;

namespace {

const std::set<std::string> kFields = {"model", "prompt",  "max_tokens", "temperature",      "top_p",
                                       "top_k", "seed",    "stop",       "stream",           "logprobs",
                                       "n",     "best_of", "echo",       "presence_penalty", "frequency_penalty"};

std::int64_t integer(const json& v, const char* field, std::int64_t low, std::int64_t high) {
  MYRIAD_CHECK(v.is_number_integer(), field << ": must be an integer, got " << excerpt(v.dump(), 60));
  const auto n = v.get<std::int64_t>();
  MYRIAD_CHECK(n >= low && n <= high, field << ": must be in [" << low << ", " << high << "], got " << n);
  return n;
}

double number(const json& v, const char* field) {
  MYRIAD_CHECK(v.is_number(), field << ": must be a number, got " << excerpt(v.dump(), 60));
  return v.get<double>();
}

std::string dump(const json& j) { return j.dump(-1, ' ', false, json::error_handler_t::replace); }

std::string token_string(std::int32_t id, const data::BpeTokenizer* tokenizer) {
  if (tokenizer == nullptr || id >= tokenizer->vocab_size()) return "<" + std::to_string(id) + ">";
  return tokenizer->decode({id});
}

json logprobs_json(const std::vector<TokenEvent>& events, const data::BpeTokenizer* tokenizer, std::int64_t offset) {
  json tokens = json::array(), token_logprobs = json::array(), top = json::array(), offsets = json::array();
  for (const TokenEvent& e : events) {
    if (e.token < 0) continue;
    const std::string piece = token_string(e.token, tokenizer);
    tokens.push_back(piece);
    token_logprobs.push_back(e.logprob);
    json alternatives = json::object();
    for (const auto& [id, lp] : e.top_logprobs) alternatives[token_string(id, tokenizer)] = lp;
    top.push_back(alternatives);
    offsets.push_back(offset);
    offset += static_cast<std::int64_t>(piece.size());
  }
  return json{{"tokens", tokens}, {"token_logprobs", token_logprobs}, {"top_logprobs", top}, {"text_offset", offsets}};
}

json choice(const std::vector<TokenEvent>& events, FinishReason reason, bool with_logprobs,
            const data::BpeTokenizer* tokenizer) {
  std::string text;
  json ids = json::array();
  for (const TokenEvent& e : events) {
    text += e.text;
    if (e.token >= 0) ids.push_back(e.token);
  }
  json c{{"index", 0}, {"text", text}, {"token_ids", ids}};
  c["logprobs"] = with_logprobs ? logprobs_json(events, tokenizer, 0) : json(nullptr);
  c["finish_reason"] = reason == FinishReason::none ? json(nullptr) : json(finish_reason_name(reason));
  return c;
}

}  // namespace

std::string error_field(const std::string& message) {
  const auto colon = message.find(':');
  if (colon == std::string::npos) return {};
  const std::string field = message.substr(0, colon);
  return kFields.count(field) != 0 || field == "body" ? field : std::string();
}

ParsedCompletion parse_completion(const std::string& body, const data::BpeTokenizer* tokenizer) {
  json j;
  try {
    j = json::parse(body);
  } catch (const json::exception& e) {
    MYRIAD_THROW("body: not valid JSON (" << e.what() << ")");
  }
  MYRIAD_CHECK(j.is_object(), "body: must be a JSON object");
  for (const auto& [key, value] : j.items()) {
    MYRIAD_CHECK(kFields.count(key) != 0, "body: unknown field '" << excerpt(key, 60) << "'");
  }
  ParsedCompletion out;
  CompletionRequest& r = out.request;
  r.sampling.max_new_tokens = 16;  // the API's defaults
  r.sampling.temperature = 1.0f;
  r.sampling.top_k = 0;
  r.sampling.top_p = 1.0f;
  if (j.contains("model")) {
    MYRIAD_CHECK(j["model"].is_string(), "model: must be a string");
    out.model = j["model"].get<std::string>();
  }
  MYRIAD_CHECK(j.contains("prompt"), "prompt: required");
  const json& prompt = j["prompt"];
  if (prompt.is_string()) {
    MYRIAD_CHECK(tokenizer != nullptr, "prompt: this server has no tokenizer; send token ids");
    r.prompt = tokenizer->encode(prompt.get<std::string>());
    r.prompt.insert(r.prompt.begin(), tokenizer->eot_id());
  } else if (prompt.is_array() && !prompt.empty() && prompt[0].is_number()) {
    for (const json& id : prompt) r.prompt.push_back(static_cast<std::int32_t>(integer(id, "prompt", 0, INT32_MAX)));
  } else if (prompt.is_array() && prompt.size() == 1 && prompt[0].is_string()) {
    MYRIAD_CHECK(tokenizer != nullptr, "prompt: this server has no tokenizer; send token ids");
    r.prompt = tokenizer->encode(prompt[0].get<std::string>());
    r.prompt.insert(r.prompt.begin(), tokenizer->eot_id());
  } else {
    MYRIAD_THROW(
        "prompt: must be a string, a list of one string, or a non-empty list of token ids "
        "(one prompt per request)");
  }
  if (j.contains("max_tokens") && !j["max_tokens"].is_null())
    r.sampling.max_new_tokens = integer(j["max_tokens"], "max_tokens", 0, 1 << 30);
  if (j.contains("temperature") && !j["temperature"].is_null()) {
    const double t = number(j["temperature"], "temperature");
    MYRIAD_CHECK(t >= 0.0 && t <= 100.0, "temperature: must be in [0, 100], got " << t);
    r.sampling.temperature = static_cast<float>(t);
  }
  if (j.contains("top_p") && !j["top_p"].is_null()) {
    const double p = number(j["top_p"], "top_p");
    MYRIAD_CHECK(p > 0.0 && p <= 1.0, "top_p: must be in (0, 1], got " << p);
    r.sampling.top_p = static_cast<float>(p);
  }
  if (j.contains("top_k") && !j["top_k"].is_null()) r.sampling.top_k = integer(j["top_k"], "top_k", 0, 1 << 30);
  if (j.contains("seed") && !j["seed"].is_null()) {
    MYRIAD_CHECK(j["seed"].is_number_integer(), "seed: must be an integer");
    r.sampling.seed = j["seed"].is_number_unsigned() ? j["seed"].get<std::uint64_t>()
                                                     : static_cast<std::uint64_t>(j["seed"].get<std::int64_t>());
  } else {
    r.sampling.seed = std::random_device{}() * 0x9E3779B97F4A7C15ull ^ std::random_device{}();
  }
  if (j.contains("stop") && !j["stop"].is_null()) {
    const json& stop = j["stop"];
    if (stop.is_string()) {
      r.stop.push_back(stop.get<std::string>());
    } else {
      MYRIAD_CHECK(stop.is_array() && stop.size() <= 4, "stop: must be a string or a list of at most 4 strings");
      for (const json& s : stop) {
        MYRIAD_CHECK(s.is_string(), "stop: must be a string or a list of at most 4 strings");
        r.stop.push_back(s.get<std::string>());
      }
    }
    MYRIAD_CHECK(r.stop.empty() || tokenizer != nullptr, "stop: this server has no tokenizer for stop strings");
  }
  if (j.contains("stream") && !j["stream"].is_null()) {
    MYRIAD_CHECK(j["stream"].is_boolean(), "stream: must be true or false");
    out.stream = j["stream"].get<bool>();
  }
  if (j.contains("logprobs") && !j["logprobs"].is_null()) r.logprobs = integer(j["logprobs"], "logprobs", 0, 20);
  auto only_default = [&](const char* field, const json& value) {
    if (j.contains(field) && !j[field].is_null()) {
      MYRIAD_CHECK(j[field] == value,
                   field << ": only " << value.dump() << " is supported, got " << excerpt(j[field].dump(), 60));
    }
  };
  only_default("n", 1);
  only_default("best_of", 1);
  only_default("echo", false);
  only_default("presence_penalty", 0);
  only_default("frequency_penalty", 0);
  if (tokenizer != nullptr) r.sampling.stop_tokens = {tokenizer->eot_id()};
  return out;
}

std::string render_completion(const CompletionIdentity& who, const std::vector<TokenEvent>& events, FinishReason reason,
                              std::int64_t prompt_tokens, bool with_logprobs, const data::BpeTokenizer* tokenizer) {
  std::int64_t generated = 0;
  for (const TokenEvent& e : events) generated += e.token >= 0 ? 1 : 0;
  json j{{"id", who.id},
         {"object", "text_completion"},
         {"created", who.created},
         {"model", who.model},
         {"choices", json::array({choice(events, reason, with_logprobs, tokenizer)})},
         {"usage",
          {{"prompt_tokens", prompt_tokens},
           {"completion_tokens", generated},
           {"total_tokens", prompt_tokens + generated}}}};
  return dump(j);
}

std::string render_chunk(const CompletionIdentity& who, const std::vector<TokenEvent>& events, FinishReason reason,
                         bool with_logprobs, const data::BpeTokenizer* tokenizer) {
  json j{{"id", who.id},
         {"object", "text_completion"},
         {"created", who.created},
         {"model", who.model},
         {"choices", json::array({choice(events, reason, with_logprobs, tokenizer)})}};
  return "data: " + dump(j) + "\n\n";
}

std::string render_error(const std::string& message, const std::string& type, const std::string& param) {
  json j{{"error",
          {{"message", message},
           {"type", type},
           {"param", param.empty() ? json(nullptr) : json(param)},
           {"code", nullptr}}}};
  return dump(j);
}

std::string internal_error_message(const std::string& id, const std::string& detail, std::FILE* log) {
  if (log != nullptr) std::fprintf(log, "myriad-serve: request %s failed: %s\n", id.c_str(), detail.c_str());
  return "the server failed this request (" + id + "); the details are in the server's log";
}

}  // namespace myriad::serve
