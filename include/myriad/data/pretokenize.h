// GPT-2's pre-tokenisation: splits text into the pieces that BPE then encodes one by one.
//
// Reproduces the matches of OpenAI's regex, evaluated by the `regex` module on Unicode text:
//
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
//
// with a hand-written scanner (no regex engine). At each position the first alternative that
// matches wins:
//   - contractions are lower-case only ("'S" is not one) and need no word boundary ("'sa" ->
//     "'s", "a"); they are tried only at the start of a piece ("x.'s" -> "x", ".'", "s");
//   - a letter, number or "other" run may take one leading U+0020 space (only that character,
//     not tabs or other spaces);
//   - a whitespace run that reaches the end of the text is one piece; otherwise its last
//     character is left to the next piece ("a   b" -> "a", "  ", " b"; "a\n\nb" -> "a", "\n",
//     "\n", "b"; "a\n\n b" -> "a", "\n\n", " b").
// Classes: \p{L} = general category L*, \p{N} = N*, \s = the White_Space property (as in the
// `regex` module), from ICU's Unicode tables (ICU 72 on Debian 12: Unicode 15.0; code points
// assigned in later versions are "other" here, as in any engine on Unicode 15). "Other" =
// everything else, including combining marks, unassigned code points and each byte of invalid
// UTF-8 (decoded one byte at a time as its own "other" character, so any byte string is split
// into pieces that cover it exactly).
// Pieces are contiguous, non-empty, in order and cover the input.
#pragma once

#include <cstddef>
#include <string_view>
#include <vector>

namespace myriad::data {

enum class CharClass : unsigned char { letter, number, space, other };

// Class of a code point (see above).
CharClass classify_code_point(char32_t code_point);

// Decodes one UTF-8 character at text[pos] (pos < text.size()). Invalid, overlong, surrogate or
// truncated sequences decode as a single byte with class `other`. Sets `length` (1..4).
char32_t decode_utf8(std::string_view text, std::size_t pos, std::size_t& length, bool& valid);

// Calls fn(std::string_view piece) for each piece of `text`, in order.
template <typename Fn>
void pretokenize_gpt2(std::string_view text, Fn&& fn);

// The pieces as views into `text`.
std::vector<std::string_view> pretokenize_gpt2(std::string_view text);

// First position p >= pos where `text` can be cut without changing its pieces (pieces(text) ==
// pieces(text[0, p)) ++ pieces(text[p, end))), so chunks can be encoded independently and the
// ids concatenated; text.size() if there is none. The cuts it finds are just after a lone
// '\n' between two printable non-space ASCII characters ("...end.\nNext..."): that newline is
// a piece of its own either way. (A cut inside a longer whitespace run would change the pieces.)
std::size_t next_safe_split(std::string_view text, std::size_t pos);

namespace detail {
// End (byte offset) of the piece that starts at `pos` (< text.size()).
std::size_t gpt2_piece_end(std::string_view text, std::size_t pos);
}  // namespace detail

template <typename Fn>
void pretokenize_gpt2(std::string_view text, Fn&& fn) {
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = detail::gpt2_piece_end(text, pos);
    fn(text.substr(pos, end - pos));
    pos = end;
  }
}

}  // namespace myriad::data
