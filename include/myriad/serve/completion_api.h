// The OpenAI completions API's request and response bodies (POST /v1/completions), as JSON.
//
// parse_completion: the request body -> a CompletionRequest, or myriad::Error whose message
// starts with the offending field ("max_tokens: must be an integer >= 0, got -1"; "body: ..." for
// malformed JSON): the HTTP front answers it with 400 and that field as `param`. Fields: model,
// prompt (a string — encoded as the end-of-text token then its tokens, as Engine.generate does —
// or an array of token ids), max_tokens (default 16), temperature (default 1), top_p (default 1),
// top_k (an extension, default 0 = all), seed, stop (a string or up to 4), stream, logprobs
// (0..20 alternatives), and n, best_of, echo, presence_penalty, frequency_penalty only at their
// defaults (1, 1, false, 0, 0: anything else is refused, not ignored). Unknown fields are refused.
// Generation ends at the end-of-text token (finish_reason "stop") unless max_tokens comes first.
//
// The renderers write the response (text_completion object with usage) and the streamed chunks
// (server-sent events "data: {...}\n\n", then "data: [DONE]\n\n"); text that is not valid UTF-8
// is written with replacement characters. Each choice also carries `token_ids` (an extension:
// the generated ids).
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "myriad/data/bpe_tokenizer.h"
#include "myriad/serve/completion_request.h"

namespace myriad::serve {

struct ParsedCompletion {
  CompletionRequest request;
  std::string model;  // "" when the body names none
  bool stream = false;
};

// `tokenizer` may be null: then prompts must be token ids and stop strings are refused.
ParsedCompletion parse_completion(const std::string& body, const data::BpeTokenizer* tokenizer);

// The field a validation message names ("max_tokens" of "max_tokens: ..."), or "".
std::string error_field(const std::string& message);

struct CompletionIdentity {
  std::string id;  // "cmpl-..."
  std::int64_t created = 0;
  std::string model;
};

// The whole response of a finished request.
std::string render_completion(const CompletionIdentity& who, const std::vector<TokenEvent>& events, FinishReason reason,
                              std::int64_t prompt_tokens, bool with_logprobs, const data::BpeTokenizer* tokenizer);
// One server-sent event with the text (and logprobs) of `events`; `reason` none while running.
std::string render_chunk(const CompletionIdentity& who, const std::vector<TokenEvent>& events, FinishReason reason,
                         bool with_logprobs, const data::BpeTokenizer* tokenizer);
// {"error": {"message", "type", "param", "code"}}.
std::string render_error(const std::string& message, const std::string& type, const std::string& param);
// The message of a 500 for request `id`: that it failed and the id to quote, nothing of `detail`
// (an engine message may name files, shapes or ranks); `detail` goes to `log` (the server's stderr).
std::string internal_error_message(const std::string& id, const std::string& detail, std::FILE* log);

}  // namespace myriad::serve
