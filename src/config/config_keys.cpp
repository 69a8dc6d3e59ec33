// Config keys by path: one lookup (visit_key) from "section.key" to the section struct and its
// Field, shared by reads, typed writes and the text overrides of RunConfig::apply_override.
#include "myriad/config/config_keys.h"

#include <optional>

#include "myriad/core/error.h"

namespace myriad {

namespace {

std::string trimmed(const std::string& s) {
  const std::size_t begin = s.find_first_not_of(" \t\r\n");
  if (begin == std::string::npos) return "";
  return s.substr(begin, s.find_last_not_of(" \t\r\n") - begin + 1);
}

// Calls fn(section, field) for the key `path` names and returns ""; otherwise returns why not
// (not section.key, an unknown section, a refused key, an unknown key with the closest one).
template <typename Config, typename Fn>
std::string visit_key(Config& config, std::string_view path, Fn&& fn) {
  const std::size_t dot = path.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot + 1 >= path.size()) {
    return "the key must be section.key (sections: " + describe_sections() + "), got '" + excerpt(path) + "'";
  }
  const std::string_view section_name = path.substr(0, dot);
  const std::string key(path.substr(dot + 1));
  std::optional<std::string> problem;  // set once the section is found
  for_each_section(config, [&](auto& section) {
    using S = std::decay_t<decltype(section)>;
    if (S::kSection != section_name) return;
    if (const Field<S>* field = find_field(S::fields(), key)) {
      fn(section, *field);
      problem = "";
    } else if (const RefusedKey* refused = find_refused_key<S>(key)) {
      problem = std::string(path) + ": " + refused->reason;
    } else {
      const auto infos = field_infos(S::fields());
      problem = "unknown key '" + std::string(path) + "'" + did_you_mean(closest_key(infos, key)) +
                "; keys of section '" + std::string(section_name) + "': " + describe_keys(infos);
    }
  });
  if (problem) return *problem;
  std::vector<std::string> names;
  for_each_section(config, [&](const auto& section) { names.emplace_back(section.kSection); });
  return "unknown section '" + std::string(section_name) + "'" + did_you_mean(closest_name(names, section_name)) +
         "; sections: " + describe_sections();
}

// "a string ('fast')", "an integer (3)", ...: what a value of the wrong type is, for messages.
std::string describe_value(const FieldValue& value) {
  const std::string text = format_field_value(value);
  switch (value.index()) {
    case 0:
      return "auto (None)";
    case 1:
      return "a boolean (" + text + ")";
    case 2:
      return "an integer (" + text + ")";
    case 3:
      return "a number (" + text + ")";
    case 4:
      return "a string ('" + std::get<std::string>(value) + "')";
    default:
      return "a list (" + text + ")";
  }
}

// `value` as the field's type (an integer widens to a number; a choice matches without regard
// to case), or nullopt with *problem set when the type does not fit.
std::optional<FieldValue> coerce(const FieldInfo& info, const FieldValue& value, std::string* problem) {
  const auto* integer = std::get_if<std::int64_t>(&value);
  const bool is_auto = std::holds_alternative<std::monostate>(value);
  switch (info.type) {
    case FieldType::boolean:
      if (std::holds_alternative<bool>(value)) return value;
      break;
    case FieldType::integer:
      if (integer) return value;
      break;
    case FieldType::number:
      if (std::holds_alternative<double>(value)) return value;
      if (integer) return FieldValue(static_cast<double>(*integer));
      break;
    case FieldType::text:
      if (std::holds_alternative<std::string>(value)) return value;
      break;
    case FieldType::choice:
      if (const auto* s = std::get_if<std::string>(&value)) {
        std::string unused;
        return parse_field_text(info, *s, &unused);  // the table's spelling when it matches
      }
      break;
    case FieldType::text_list:
      if (std::holds_alternative<std::vector<std::string>>(value)) return value;
      break;
    case FieldType::auto_boolean:
      if (is_auto || std::holds_alternative<bool>(value)) return value;
      break;
    case FieldType::auto_number:
      if (is_auto || std::holds_alternative<double>(value)) return value;
      if (integer) return FieldValue(static_cast<double>(*integer));
      break;
  }
  *problem = "expected " + std::string(field_type_name(info.type)) + ", got " + describe_value(value);
  return std::nullopt;
}

}  // namespace

std::vector<std::string> config_keys() {
  std::vector<std::string> keys;
  const RunConfig defaults;
  for_each_section(defaults, [&](const auto& section) {
    for (const auto& field : section.fields()) keys.push_back(std::string(section.kSection) + "." + field.name);
  });
  return keys;
}

std::string config_key_problem(std::string_view path) {
  const RunConfig defaults;
  return visit_key(defaults, path, [](const auto&, const auto&) {});
}

const FieldInfo& config_key_info(std::string_view path) {
  const FieldInfo* info = nullptr;
  const RunConfig defaults;
  const std::string problem = visit_key(defaults, path, [&](const auto&, const auto& field) { info = &field; });
  MYRIAD_CHECK(problem.empty(), problem);
  return *info;  // an entry of a static field table: outlives `defaults`
}

FieldValue config_value(const RunConfig& config, std::string_view path) {
  FieldValue value;
  const std::string problem =
      visit_key(config, path, [&](const auto& section, const auto& field) { value = field.get(section); });
  MYRIAD_CHECK(problem.empty(), problem);
  return value;
}

void set_config_value(RunConfig& config, std::string_view path, const FieldValue& value) {
  std::string problem;
  const std::string lookup = visit_key(config, path, [&](auto& section, const auto& field) {
    std::optional<FieldValue> typed = coerce(field, value, &problem);
    if (typed) problem = field_value_problem(field, *typed);
    if (problem.empty()) field.set(section, *typed);
  });
  MYRIAD_CHECK(lookup.empty(), lookup);
  MYRIAD_CHECK(problem.empty(), path << ": " << problem);
}

void RunConfig::apply_override(const std::string& key_equals_value) {
  const std::string at = "override '" + key_equals_value + "'";
  const std::size_t equals = key_equals_value.find('=');
  MYRIAD_CHECK(equals != std::string::npos, at << ": expected section.key=value, e.g. training.lr=3e-4");
  const std::string path = trimmed(key_equals_value.substr(0, equals));
  const std::string text = trimmed(key_equals_value.substr(equals + 1));
  std::string problem;
  const std::string lookup = visit_key(*this, path, [&](auto& section, const auto& field) {
    std::optional<FieldValue> value = parse_field_text(field, text, &problem);
    if (value) problem = field_value_problem(field, *value);
    if (problem.empty()) field.set(section, *value);
  });
  MYRIAD_CHECK(lookup.empty(), at << ": " << lookup);
  MYRIAD_CHECK(problem.empty(), at << ": " << path << ": " << problem);
}

}  // namespace myriad
