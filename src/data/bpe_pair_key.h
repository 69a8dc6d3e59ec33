// The key of an adjacent symbol pair (left, right) in the BPE tables: left in the high 32 bits,
// right in the low ones, so that every pair of 32-bit ids has its own 64-bit key. Internal to
// src/data: the tokenizer's merge lookup and the trainer's pair counts use the same key.
#pragma once

#include <cstdint>

namespace myriad::data {

inline std::uint64_t pair_key(std::int32_t left, std::int32_t right) {
  return (static_cast<std::uint64_t>(static_cast<std::uint32_t>(left)) << 32) | static_cast<std::uint32_t>(right);
}

}  // namespace myriad::data
