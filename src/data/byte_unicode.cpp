// GPT-2's byte <-> Unicode map (see byte_unicode.h). The tables are built at compile time;
// tests check the bijection and the known anchors (' ' -> U+0120, '\n' -> U+010A, 'A' -> 'A').
#include "myriad/data/byte_unicode.h"

#include <array>

#include "myriad/data/pretokenize.h"

namespace myriad::data {

namespace {

constexpr bool is_printable_byte(int b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

constexpr std::array<char32_t, 256> make_byte_to_unicode() {
  std::array<char32_t, 256> table{};
  char32_t next = 256;
  for (int b = 0; b < 256; ++b) table[b] = is_printable_byte(b) ? static_cast<char32_t>(b) : next++;
  return table;
}

constexpr std::array<char32_t, 256> kByteToUnicode = make_byte_to_unicode();

// All mapped code points are below 0x144 (188 identity + 68 shifted from 256).
constexpr char32_t kMapEnd = 256 + 68;

constexpr std::array<std::int16_t, kMapEnd> make_unicode_to_byte() {
  std::array<std::int16_t, kMapEnd> table{};
  for (auto& v : table) v = -1;
  for (int b = 0; b < 256; ++b) table[kByteToUnicode[b]] = static_cast<std::int16_t>(b);
  return table;
}

constexpr std::array<std::int16_t, kMapEnd> kUnicodeToByte = make_unicode_to_byte();

void append_utf8(std::string& out, char32_t cp) {
  // Only code points below U+0800 occur in the map.
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace

char32_t byte_to_unicode(std::uint8_t byte) { return kByteToUnicode[byte]; }

int unicode_to_byte(char32_t code_point) { return code_point < kMapEnd ? kUnicodeToByte[code_point] : -1; }

std::string bytes_to_unicode_string(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size() * 2);
  for (char c : bytes) append_utf8(out, kByteToUnicode[static_cast<std::uint8_t>(c)]);
  return out;
}

bool unicode_string_to_bytes(std::string_view text, std::string& bytes) {
  bytes.clear();
  bytes.reserve(text.size());
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t length = 0;
    bool valid = false;
    char32_t cp = decode_utf8(text, pos, length, valid);
    if (!valid) return false;
    int b = unicode_to_byte(cp);
    if (b < 0) return false;
    bytes.push_back(static_cast<char>(b));
    pos += length;
  }
  return true;
}

}  // namespace myriad::data
