// IncrementalText — a request's generated text released token by token, safe to stream.
//
// Tokens are byte strings (byte-level BPE): their concatenation is the text. add() appends a
// token's bytes and returns the part of the text that can be released now: everything except a
// trailing incomplete UTF-8 character and a trailing piece that could still grow into a stop
// string. When a stop string appears, the text before it is released, stopped() turns true and
// nothing after it is ever released. finish() releases what was held back (an incomplete
// character as the replacement character U+FFFD). Invariant: the concatenation of everything
// released is the text up to the first stop string (or all of it), with the same bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace myriad::serve {

class IncrementalText {
 public:
  explicit IncrementalText(std::vector<std::string> stop = {});
  std::string add(const std::string& token_bytes);
  std::string finish();
  bool stopped() const { return stopped_; }
  const std::string& text() const { return text_; }  // every byte added so far

 private:
  std::vector<std::string> stop_;
  std::string text_;
  std::size_t released_ = 0;
  std::size_t longest_stop_ = 0;
  bool stopped_ = false;
};

// Bytes at the end of `s` that begin a UTF-8 character not yet complete (0..3).
std::size_t incomplete_utf8_tail(const std::string& s);

}  // namespace myriad::serve
