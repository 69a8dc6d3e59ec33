// Field registry — every config key is described once, in a table per config struct.
//
// A Field<S> names one key of section struct S (name, aliases), says what kind of value it holds
// (FieldType), which values are allowed (a choice list or a FieldCheck such as ">= 1"), what it
// means (one line, used by the generated reference in docs/config.md), and how to read and write
// the member (get/set through a FieldValue). YAML parsing, `--set key=value` overrides, to_yaml,
// validate() and the docs all walk these tables, so a key is added in exactly one place.
//
// Invariants: get() returns a value of the field's type (std::monostate only for the auto_* types,
// meaning "unset, derived from other keys"); set() is only called with a value that passed
// field_value_problem(), so it never has to check anything itself.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "myriad/config/choices.h"

namespace myriad {

enum class FieldType {
  boolean,       // true / false
  integer,       // whole number, stored as int / int64 / uint64
  number,        // floating point
  text,          // free string ("" allowed)
  text_list,     // list of strings; `allowed` (when non-empty) restricts the members
  choice,        // one string out of `allowed`
  auto_boolean,  // true / false / auto (unset: derived from other keys)
  auto_number,   // number / auto
};

// "bool", "int", "float", "string", "list of strings", "choice", "bool or auto", "float or auto".
std::string_view field_type_name(FieldType type);

// The value of one key, independent of YAML. std::monostate is "auto".
using FieldValue = std::variant<std::monostate, bool, std::int64_t, double, std::string, std::vector<std::string>>;

// YAML-compatible text of a value: 6e-4 -> "0.0006", 1e-5 -> "1.0e-05", [norm, bias], auto, "".
std::string format_field_value(const FieldValue& value);

// A constraint on a value beyond its type: a description for errors and docs (">= 1",
// "in (0, 0.5]") and the test. An empty description means "no constraint". auto values pass.
struct FieldCheck {
  std::string description = {};
  std::function<bool(const FieldValue&)> accepts = {};
};
FieldCheck at_least(double low);                                                  // >= low
FieldCheck greater_than(double low);                                              // > low
FieldCheck in_range(double low, double high, bool low_closed, bool high_closed);  // [low, high], (low, high], ...
FieldCheck non_empty();                                                           // a non-empty string

// Everything about a key except how to reach the member.
struct FieldInfo {
  std::string name;                  // canonical key, e.g. "global_batch_size"
  std::vector<std::string> aliases;  // accepted alternative spellings, e.g. {"batch_size"}
  FieldType type = FieldType::text;
  std::vector<std::string> allowed;  // choice: the values; text_list: the allowed members
  bool repeats = false;              // text_list: members may repeat (a sequence, not a set)
  FieldCheck check;                  // extra constraint (range, form)
  std::string meaning;               // one line for docs/config.md
  std::int64_t min_integer = std::numeric_limits<std::int64_t>::min();  // integer: what the member can hold
  std::int64_t max_integer = std::numeric_limits<std::int64_t>::max();

  bool matches(std::string_view key) const;  // name or one of the aliases
};

// Parses the text of a scalar (a YAML scalar, or the value of a --set override) as the field's
// type. Returns nullopt and sets *problem ("expected a number, got 'fast'") when it does not parse.
// text_list accepts "[a, b]", "a,b" or "" (empty list).
std::optional<FieldValue> parse_field_text(const FieldInfo& info, std::string_view text, std::string* problem);

// "" when `value` is acceptable for the field, else what is wrong, e.g. "must be >= 1, got 0" or
// "must be one of gpt2, llama, got 'gpt3'".
std::string field_value_problem(const FieldInfo& info, const FieldValue& value);

// "n_layer, n_head, global_batch_size (alias batch_size), ..." — the keys of a section for errors.
std::string describe_keys(const std::vector<const FieldInfo*>& fields);

// The name closest to `key` by edit distance (a likely typo), or "" if none is close.
std::string closest_name(const std::vector<std::string>& names, std::string_view key);
// The same over the names and aliases of `fields`.
std::string closest_key(const std::vector<const FieldInfo*>& fields, std::string_view key);
// " (did you mean 'closest'?)" for an error message, or "" when `closest` is empty.
std::string did_you_mean(const std::string& closest);

template <typename S>
struct Field : FieldInfo {
  std::function<FieldValue(const S&)> get;
  std::function<void(S&, const FieldValue&)> set;
};

// Options of make_field beyond name, member and meaning.
struct FieldOptions {
  std::vector<std::string> aliases = {};
  std::vector<std::string> allowed = {};  // std::string member: makes it a choice; list member: allowed members
  bool repeats = false;                   // list member: a sequence whose members may repeat
  FieldCheck check = {};
};

namespace detail {
template <typename T>
struct IsOptional : std::false_type {};
template <typename T>
struct IsOptional<std::optional<T>> : std::true_type {};
}  // namespace detail

// Builds the Field for `member` of S; the FieldType follows from the member's C++ type:
// bool, integral, double, std::string (choice when options.allowed is set), vector<string>,
// an enum with ChoiceTraits, optional<bool>, optional<double>.
template <typename S, typename T>
// NOLINTNEXTLINE(performance-unnecessary-value-param): sinks, all moved from; clang-tidy 14 misses it (llvm#43943)
Field<S> make_field(std::string name, T S::*member, std::string meaning, FieldOptions options = {}) {
  Field<S> field;
  field.name = std::move(name);
  field.aliases = std::move(options.aliases);
  field.allowed = std::move(options.allowed);
  field.repeats = options.repeats;
  field.check = std::move(options.check);
  field.meaning = std::move(meaning);
  if constexpr (std::is_same_v<T, bool>) {
    field.type = FieldType::boolean;
    field.get = [member](const S& s) { return FieldValue(s.*member); };
    field.set = [member](S& s, const FieldValue& v) { s.*member = std::get<bool>(v); };
  } else if constexpr (std::is_integral_v<T>) {
    field.type = FieldType::integer;
    field.min_integer = static_cast<std::int64_t>(std::numeric_limits<T>::min());
    constexpr std::uint64_t type_max = static_cast<std::uint64_t>(std::numeric_limits<T>::max());
    constexpr std::uint64_t int64_max = static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max());
    field.max_integer = static_cast<std::int64_t>(type_max < int64_max ? type_max : int64_max);
    field.get = [member](const S& s) { return FieldValue(static_cast<std::int64_t>(s.*member)); };
    field.set = [member](S& s, const FieldValue& v) { s.*member = static_cast<T>(std::get<std::int64_t>(v)); };
  } else if constexpr (std::is_same_v<T, double>) {
    field.type = FieldType::number;
    field.get = [member](const S& s) { return FieldValue(s.*member); };
    field.set = [member](S& s, const FieldValue& v) { s.*member = std::get<double>(v); };
  } else if constexpr (std::is_same_v<T, std::string>) {
    field.type = field.allowed.empty() ? FieldType::text : FieldType::choice;
    field.get = [member](const S& s) { return FieldValue(s.*member); };
    field.set = [member](S& s, const FieldValue& v) { s.*member = std::get<std::string>(v); };
  } else if constexpr (std::is_same_v<T, std::vector<std::string>>) {
    field.type = FieldType::text_list;
    field.get = [member](const S& s) { return FieldValue(s.*member); };
    field.set = [member](S& s, const FieldValue& v) { s.*member = std::get<std::vector<std::string>>(v); };
  } else if constexpr (std::is_enum_v<T>) {
    field.type = FieldType::choice;
    field.allowed.clear();
    for (std::string_view n : ChoiceTraits<T>::names) field.allowed.emplace_back(n);
    field.get = [member](const S& s) { return FieldValue(std::string(choice_name(s.*member))); };
    field.set = [member](S& s, const FieldValue& v) { s.*member = *parse_choice<T>(std::get<std::string>(v)); };
  } else if constexpr (detail::IsOptional<T>::value) {
    using Inner = typename T::value_type;
    static_assert(std::is_same_v<Inner, bool> || std::is_same_v<Inner, double>, "optional<bool> or optional<double>");
    field.type = std::is_same_v<Inner, bool> ? FieldType::auto_boolean : FieldType::auto_number;
    field.get = [member](const S& s) { return (s.*member) ? FieldValue(*(s.*member)) : FieldValue(std::monostate{}); };
    field.set = [member](S& s, const FieldValue& v) {
      if (std::holds_alternative<std::monostate>(v)) {
        s.*member = std::nullopt;
      } else {
        s.*member = std::get<Inner>(v);
      }
    };
  } else {
    static_assert(sizeof(T) == 0, "make_field: unsupported member type");
  }
  return field;
}

// A key a section refuses with a reason: a spelling users bring from other tools or from the seed
// documents that would mean something else here, or a feature that is not implemented yet (so the
// key would silently do nothing). A section lists them in `static refused_keys()`.
struct RefusedKey {
  std::string name;
  std::string reason;  // why, and what to use instead
};

// The refused key `key` of section S, or nullptr (also when S refuses none).
template <typename S>
const RefusedKey* find_refused_key(std::string_view key) {
  if constexpr (requires { S::refused_keys(); }) {
    for (const RefusedKey& r : S::refused_keys()) {
      if (r.name == key) return &r;
    }
  }
  return nullptr;
}

template <typename S>
std::vector<const FieldInfo*> field_infos(const std::vector<Field<S>>& fields) {
  std::vector<const FieldInfo*> infos;
  infos.reserve(fields.size());
  for (const auto& f : fields) infos.push_back(&f);
  return infos;
}

template <typename S>
const Field<S>* find_field(const std::vector<Field<S>>& fields, std::string_view key) {
  for (const auto& f : fields) {
    if (f.matches(key)) return &f;
  }
  return nullptr;
}

// Throws myriad::Error "<section>.<key>: must be ..." for the first field of `s` whose value is
// not acceptable (types, ranges, choices): the per-key part of validate().
void throw_field_problem(std::string_view section, const FieldInfo& info, const std::string& problem);
template <typename S>
void validate_fields(const S& s) {
  for (const auto& f : S::fields()) {
    std::string problem = field_value_problem(f, f.get(s));
    if (!problem.empty()) throw_field_problem(S::kSection, f, problem);
  }
}

}  // namespace myriad
