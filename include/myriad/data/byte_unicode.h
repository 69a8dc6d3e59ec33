// GPT-2's reversible byte <-> Unicode mapping (bytes_to_unicode in OpenAI's encoder.py).
//
// Byte-level BPE files store every token as a string of Unicode characters, one character per
// byte: the 188 printable bytes '!'..'~', '¡'..'¬', '®'..'ÿ' map to the code point of the same
// value, the other 68 bytes (controls, space, 0x7F..0xA0, 0xAD) map in increasing order to
// U+0100, U+0101, ... (so ' ' is 'Ġ' U+0120 and '\n' is 'Ċ' U+010A). The map is a bijection
// between the 256 bytes and 256 code points below U+0144.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace myriad::data {

// Code point that stands for `byte` in GPT-2's vocabulary files.
char32_t byte_to_unicode(std::uint8_t byte);

// Inverse of byte_to_unicode: the byte for `code_point`, or -1 if no byte maps to it.
int unicode_to_byte(char32_t code_point);

// Raw bytes -> the UTF-8 text of their mapped code points (e.g. " world" -> "Ġworld").
std::string bytes_to_unicode_string(std::string_view bytes);

// Inverse of bytes_to_unicode_string. Returns false (and leaves `bytes` unspecified) when `text`
// is not valid UTF-8 or holds a code point outside the map.
bool unicode_string_to_bytes(std::string_view text, std::string& bytes);

}  // namespace myriad::data
