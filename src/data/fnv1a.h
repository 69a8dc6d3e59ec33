// FNV-1a, the 64-bit byte hash that the dedup pass keys documents by and MinHash hashes shingles
// with (internal to src/data). `hash` is the offset basis: the standard one by default, another
// value for a second, independent key of the same bytes.
#pragma once

#include <cstdint>
#include <string_view>

namespace myriad::data {

inline std::uint64_t fnv1a(std::string_view bytes, std::uint64_t hash = 0xcbf29ce484222325ull) {
  for (char c : bytes) hash = (hash ^ static_cast<unsigned char>(c)) * 0x100000001b3ull;
  return hash;
}

}  // namespace myriad::data
