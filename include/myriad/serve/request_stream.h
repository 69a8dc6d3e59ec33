// RequestStream — the channel between the scheduler thread (which produces a request's tokens)
// and the HTTP thread that answers it. Thread-safe; the scheduler pushes events and finishes the
// stream exactly once; the reader takes events as they come (wait_for) and may cancel (a client
// that went away): the scheduler then drops the request at its next step and frees its blocks.
#pragma once

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <vector>

#include "myriad/serve/completion_request.h"

namespace myriad::serve {

class RequestStream {
 public:
  // Scheduler side.
  void push(TokenEvent event);
  void finish(FinishReason reason, std::string error = {});
  bool cancelled() const;

  // Reader side: waits up to `timeout` for events or the finish; moves the new events into
  // `out` (appending) and returns whether the stream has finished (then `out` holds the last ones).
  bool wait_for(std::chrono::milliseconds timeout, std::vector<TokenEvent>& out);
  void cancel();
  FinishReason reason() const;
  std::string error() const;
  // Prompt tokens the model saw and tokens generated so far (usage).
  void set_prompt_tokens(std::int64_t n);
  std::int64_t prompt_tokens() const;

 private:
  mutable std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<TokenEvent> pending_;
  FinishReason reason_ = FinishReason::none;
  std::string error_;
  bool cancelled_ = false;
  std::int64_t prompt_tokens_ = 0;
};

}  // namespace myriad::serve
