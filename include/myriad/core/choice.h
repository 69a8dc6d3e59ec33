// Enumerations spelled as words — one table of names per enum, used both ways.
//
// An enum E that appears in configs, logs or bindings specialises ChoiceTraits<E> with `names`:
// its enumerators are numbered 0..N-1 in the order of that array, which holds the strings a
// config file uses (matched without regard to case: the 1.6T MoE recipe's "MoE" is moe; printed
// as listed). choice_name / parse_choice convert both ways, require_choice throws a myriad::Error
// naming every allowed spelling. The config's field registry (config/field.h) uses the same table
// to parse, print, validate and document a key, so a spelling is written once.
#pragma once

#include <array>
#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

#include "myriad/core/error.h"

namespace myriad {

template <typename E>
struct ChoiceTraits;

template <typename E>
std::string_view choice_name(E value) {
  return ChoiceTraits<E>::names.at(static_cast<std::size_t>(value));
}

// The enumerator spelled `name`, or nullopt.
template <typename E>
std::optional<E> parse_choice(std::string_view name) {
  const auto& names = ChoiceTraits<E>::names;
  for (std::size_t i = 0; i < names.size(); ++i) {
    if (names[i].size() != name.size()) continue;
    bool same = true;
    for (std::size_t c = 0; c < name.size() && same; ++c) {
      const auto lower = [](char ch) { return ch >= 'A' && ch <= 'Z' ? static_cast<char>(ch - 'A' + 'a') : ch; };
      same = lower(names[i][c]) == lower(name[c]);
    }
    if (same) return static_cast<E>(i);
  }
  return std::nullopt;
}

// The enumerator spelled `name`; throws "<what> '<name>' unknown; allowed: a, b, c" otherwise.
template <typename E>
E require_choice(std::string_view name, std::string_view what) {
  if (std::optional<E> value = parse_choice<E>(name)) return *value;
  std::string allowed;
  for (std::string_view n : ChoiceTraits<E>::names) {
    if (!allowed.empty()) allowed += ", ";
    allowed += n;
  }
  MYRIAD_THROW(what << " '" << name << "' unknown; allowed: " << allowed);
}

}  // namespace myriad
