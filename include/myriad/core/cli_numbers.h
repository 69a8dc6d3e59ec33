// Command-line numbers for the tools and benchmarks: the whole argument must parse, else an
// error naming the flag and the text.
#pragma once

#include <cstdint>
#include <exception>
#include <string>

#include "myriad/core/error.h"

namespace myriad::tools {

inline std::int64_t parse_int(const std::string& flag, const std::string& text) {
  std::size_t used = 0;
  long long value = 0;
  try {
    value = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  MYRIAD_CHECK(used == text.size() && !text.empty(), flag << " expects an integer, got '" << text << "'");
  return value;
}

inline double parse_double(const std::string& flag, const std::string& text) {
  std::size_t used = 0;
  double value = 0;
  try {
    value = std::stod(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  MYRIAD_CHECK(used == text.size() && !text.empty(), flag << " expects a number, got '" << text << "'");
  return value;
}

}  // namespace myriad::tools
