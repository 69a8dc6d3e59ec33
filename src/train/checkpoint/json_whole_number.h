// whole_number: an integer field of a checkpoint manifest or a safetensors header, checked.
//
// nlohmann::json converts a JSON float to an integer type with a plain cast, which is undefined
// behaviour past the type's range (fuzz_checkpoint_manifest found a piece's "bytes":
// 4.4e89; UBSan stopped there). Every integer these readers take from a file goes through here:
// a non-integer, or an integer outside T's range, is a myriad::Error naming `what` and the value.
// Internal to src/train/checkpoint.
#pragma once

#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <vector>

#include "myriad/core/error.h"

namespace myriad::train {

template <typename T>
T whole_number(const nlohmann::json& value, const std::string& what) {
  static_assert(std::is_integral_v<T> && sizeof(T) <= 8);
  constexpr auto lowest = static_cast<std::int64_t>(std::numeric_limits<T>::min());
  constexpr auto highest = static_cast<std::uint64_t>(std::numeric_limits<T>::max());
  bool fits = false;
  if (value.is_number_unsigned()) {
    fits = value.get<std::uint64_t>() <= highest;
  } else if (value.is_number_integer()) {
    const auto v = value.get<std::int64_t>();
    fits = v >= lowest && (v < 0 || static_cast<std::uint64_t>(v) <= highest);
  }
  MYRIAD_CHECK(fits, what << " is " << excerpt(value.dump(), 60) << ", not a whole number in [" << lowest << ", "
                          << highest << "]");
  return value.is_number_unsigned() ? static_cast<T>(value.get<std::uint64_t>())
                                    : static_cast<T>(value.get<std::int64_t>());
}

// A JSON array of whole numbers (a shape), each checked as above.
inline std::vector<std::int64_t> whole_numbers(const nlohmann::json& array, const std::string& what) {
  MYRIAD_CHECK(array.is_array(), what << " is " << excerpt(array.dump(), 60) << ", not an array");
  std::vector<std::int64_t> out;
  for (const nlohmann::json& v : array) out.push_back(whole_number<std::int64_t>(v, what));
  return out;
}

}  // namespace myriad::train
