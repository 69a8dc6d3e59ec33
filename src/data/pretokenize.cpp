// GPT-2 pre-tokenisation as a hand-written scanner (see pretokenize.h for the rules).
// Invariant: gpt2_piece_end(text, pos) > pos, so the pieces always cover the text.
// Classes come from ICU (general category, White_Space); ASCII goes through a constant table.
#include "myriad/data/pretokenize.h"

#include <unicode/uchar.h>

#include <algorithm>
#include <array>
#include <cstdint>

namespace myriad::data {

namespace {

constexpr std::array<CharClass, 128> make_ascii_classes() {
  std::array<CharClass, 128> table{};
  for (int c = 0; c < 128; ++c) {
    if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'))
      table[c] = CharClass::letter;
    else if (c >= '0' && c <= '9')
      table[c] = CharClass::number;
    else if (c == ' ' || (c >= '\t' && c <= '\r'))
      table[c] = CharClass::space;
    else
      table[c] = CharClass::other;
  }
  return table;
}

constexpr std::array<CharClass, 128> kAsciiClasses = make_ascii_classes();

bool is_continuation(unsigned char b) { return (b & 0xC0) == 0x80; }

// Class and byte length of the character at text[pos].
inline CharClass class_at(std::string_view text, std::size_t pos, std::size_t& length) {
  unsigned char b = static_cast<unsigned char>(text[pos]);
  if (b < 0x80) {
    length = 1;
    return kAsciiClasses[b];
  }
  bool valid = false;
  char32_t cp = decode_utf8(text, pos, length, valid);
  return valid ? classify_code_point(cp) : CharClass::other;
}

// End of the run of characters of class `cls` that starts at `pos`.
inline std::size_t run_end(std::string_view text, std::size_t pos, CharClass cls) {
  std::size_t length = 0;
  while (pos < text.size() && class_at(text, pos, length) == cls) pos += length;
  return pos;
}

}  // namespace

CharClass classify_code_point(char32_t code_point) {
  if (code_point < 0x80) return kAsciiClasses[code_point];
  UChar32 c = static_cast<UChar32>(code_point);
  if (u_isUWhiteSpace(c)) return CharClass::space;
  std::uint32_t mask = U_GET_GC_MASK(c);
  if (mask & U_GC_L_MASK) return CharClass::letter;
  if (mask & U_GC_N_MASK) return CharClass::number;
  return CharClass::other;
}

char32_t decode_utf8(std::string_view text, std::size_t pos, std::size_t& length, bool& valid) {
  const std::size_t left = text.size() - pos;
  const unsigned char b0 = static_cast<unsigned char>(text[pos]);
  length = 1;
  valid = false;
  if (b0 < 0x80) {
    valid = true;
    return b0;
  }
  std::size_t need = 0;
  unsigned char lo = 0x80, hi = 0xBF;  // allowed range of the second byte
  char32_t cp = 0;
  if (b0 >= 0xC2 && b0 <= 0xDF) {
    need = 1;
    cp = b0 & 0x1F;
  } else if (b0 >= 0xE0 && b0 <= 0xEF) {
    need = 2;
    cp = b0 & 0x0F;
    if (b0 == 0xE0) lo = 0xA0;  // no overlongs
    if (b0 == 0xED) hi = 0x9F;  // no surrogates
  } else if (b0 >= 0xF0 && b0 <= 0xF4) {
    need = 3;
    cp = b0 & 0x07;
    if (b0 == 0xF0) lo = 0x90;  // no overlongs
    if (b0 == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return b0;
  }
  if (left <= need) return b0;
  const unsigned char b1 = static_cast<unsigned char>(text[pos + 1]);
  if (b1 < lo || b1 > hi) return b0;
  cp = (cp << 6) | (b1 & 0x3F);
  for (std::size_t i = 2; i <= need; ++i) {
    const unsigned char b = static_cast<unsigned char>(text[pos + i]);
    if (!is_continuation(b)) return b0;
    cp = (cp << 6) | (b & 0x3F);
  }
  length = need + 1;
  valid = true;
  return cp;
}

namespace detail {

std::size_t gpt2_piece_end(std::string_view text, std::size_t pos) {
  const std::size_t n = text.size();
  const char c = text[pos];
  // 's 't 'm 'd 're 've 'll (case-sensitive, no boundary needed after them).
  if (c == '\'' && pos + 1 < n) {
    const char d = text[pos + 1];
    if (d == 's' || d == 't' || d == 'm' || d == 'd') return pos + 2;
    if (pos + 2 < n) {
      const char e = text[pos + 2];
      if ((d == 'r' && e == 'e') || (d == 'v' && e == 'e') || (d == 'l' && e == 'l')) return pos + 3;
    }
  }
  std::size_t length = 0;
  // " ?\p{L}+", " ?\p{N}+", " ?[^\s\p{L}\p{N}]+" with the optional space.
  if (c == ' ' && pos + 1 < n) {
    std::size_t next_length = 0;
    CharClass next = class_at(text, pos + 1, next_length);
    if (next != CharClass::space) return run_end(text, pos + 1 + next_length, next);
  }
  CharClass cls = class_at(text, pos, length);
  if (cls != CharClass::space) return run_end(text, pos + length, cls);
  // "\s+(?!\S)" then "\s+": the whole run if it ends the text, else all but its last
  // character, else (a single character) that character.
  std::size_t last_start = pos;
  std::size_t q = pos + length;
  while (q < n) {
    if (class_at(text, q, length) != CharClass::space) break;
    last_start = q;
    q += length;
  }
  if (q == n) return n;
  return last_start > pos ? last_start : q;
}

}  // namespace detail

std::size_t next_safe_split(std::string_view text, std::size_t pos) {
  const auto printable = [](char c) { return c > ' ' && c < 0x7F; };
  for (std::size_t p = std::max<std::size_t>(pos, 2); p < text.size(); ++p) {
    if (text[p - 1] == '\n' && printable(text[p - 2]) && printable(text[p])) return p;
  }
  return text.size();
}

std::vector<std::string_view> pretokenize_gpt2(std::string_view text) {
  std::vector<std::string_view> pieces;
  pretokenize_gpt2(text, [&](std::string_view piece) { pieces.push_back(piece); });
  return pieces;
}

}  // namespace myriad::data
