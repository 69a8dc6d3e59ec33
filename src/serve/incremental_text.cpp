// IncrementalText: streaming-safe release of generated text (serve/incremental_text.h).
#include "myriad/serve/incremental_text.h"

#include <algorithm>

namespace myriad::serve {

std::size_t incomplete_utf8_tail(const std::string& s) {
  // Walk back over at most 3 continuation bytes to the lead byte; complete when the lead byte's
  // length fits in what follows it.
  const std::size_t n = s.size();
  for (std::size_t back = 1; back <= std::min<std::size_t>(4, n); ++back) {
    const auto c = static_cast<unsigned char>(s[n - back]);
    if ((c & 0xC0) == 0x80) continue;  // a continuation byte
    std::size_t need = 1;
    if ((c & 0xE0) == 0xC0)
      need = 2;
    else if ((c & 0xF0) == 0xE0)
      need = 3;
    else if ((c & 0xF8) == 0xF0)
      need = 4;
    return need > back ? back : 0;
  }
  return 0;  // only continuation bytes: nothing to wait for
}

IncrementalText::IncrementalText(std::vector<std::string> stop) : stop_(std::move(stop)) {
  stop_.erase(std::remove(stop_.begin(), stop_.end(), std::string()), stop_.end());
  for (const std::string& s : stop_) longest_stop_ = std::max(longest_stop_, s.size());
}

std::string IncrementalText::add(const std::string& token_bytes) {
  if (stopped_) return {};
  text_ += token_bytes;
  // The first stop string that now appears (searching only where a new one can start).
  const std::size_t from = released_;
  std::size_t cut = std::string::npos;
  for (const std::string& s : stop_) cut = std::min(cut, text_.find(s, from));
  if (cut != std::string::npos) {
    stopped_ = true;
    std::string out = text_.substr(released_, cut - released_);
    released_ = cut;
    return out;
  }
  // Hold back a suffix that is a proper prefix of a stop string, and an unfinished character.
  std::size_t hold = 0;
  for (const std::string& s : stop_) {
    for (std::size_t len = std::min(s.size() - 1, text_.size() - released_); len > hold; --len) {
      if (text_.compare(text_.size() - len, len, s, 0, len) == 0) {
        hold = len;
        break;
      }
    }
  }
  hold = std::max(hold, incomplete_utf8_tail(text_));
  const std::size_t end = std::max(released_, text_.size() - std::min(hold, text_.size()));
  std::string out = text_.substr(released_, end - released_);
  released_ = end;
  return out;
}

std::string IncrementalText::finish() {
  if (stopped_) return {};
  std::string out = text_.substr(released_);
  released_ = text_.size();
  if (const std::size_t tail = incomplete_utf8_tail(out); tail > 0)
    out.replace(out.size() - tail, tail, "\xEF\xBF\xBD");
  return out;
}

}  // namespace myriad::serve
