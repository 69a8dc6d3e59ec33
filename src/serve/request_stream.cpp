// RequestStream (serve/request_stream.h) and the finish reasons' names.
#include "myriad/serve/request_stream.h"

namespace myriad::serve {

const char* finish_reason_name(FinishReason reason) {
  switch (reason) {
    case FinishReason::none:
      return "";
    case FinishReason::stop:
      return "stop";
    case FinishReason::length:
      return "length";
    case FinishReason::cancelled:
      return "cancelled";
    case FinishReason::error:
      return "error";
  }
  return "";
}

void RequestStream::push(TokenEvent event) {
  {
    std::lock_guard lock(mutex_);
    pending_.push_back(std::move(event));
  }
  changed_.notify_all();
}

void RequestStream::finish(FinishReason reason, std::string error) {
  {
    std::lock_guard lock(mutex_);
    if (reason_ != FinishReason::none) return;
    reason_ = reason;
    error_ = std::move(error);
  }
  changed_.notify_all();
}

bool RequestStream::cancelled() const {
  std::lock_guard lock(mutex_);
  return cancelled_;
}

bool RequestStream::wait_for(std::chrono::milliseconds timeout, std::vector<TokenEvent>& out) {
  std::unique_lock lock(mutex_);
  changed_.wait_for(lock, timeout, [&] { return !pending_.empty() || reason_ != FinishReason::none; });
  for (TokenEvent& e : pending_) out.push_back(std::move(e));
  pending_.clear();
  return reason_ != FinishReason::none;
}

void RequestStream::cancel() {
  std::lock_guard lock(mutex_);
  cancelled_ = true;
}

FinishReason RequestStream::reason() const {
  std::lock_guard lock(mutex_);
  return reason_;
}

std::string RequestStream::error() const {
  std::lock_guard lock(mutex_);
  return error_;
}

void RequestStream::set_prompt_tokens(std::int64_t n) {
  std::lock_guard lock(mutex_);
  prompt_tokens_ = n;
}

std::int64_t RequestStream::prompt_tokens() const {
  std::lock_guard lock(mutex_);
  return prompt_tokens_;
}

}  // namespace myriad::serve
