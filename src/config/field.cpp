// Field registry helpers: parsing scalar text by field type, printing values, range/choice checks
// and the key listings used in error messages. Nothing here knows YAML or a particular section.
#include "myriad/config/field.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <set>
#include <sstream>

#include "myriad/core/error.h"

namespace myriad {

namespace {

std::string_view trim(std::string_view s) {
  const char* space = " \t\r\n";
  std::size_t begin = s.find_first_not_of(space);
  if (begin == std::string_view::npos) return {};
  std::size_t end = s.find_last_not_of(space);
  return s.substr(begin, end - begin + 1);
}

std::string lower(std::string_view s) {
  std::string out(s);
  std::transform(out.begin(), out.end(), out.begin(), [](unsigned char c) { return std::tolower(c); });
  return out;
}

// Shortest text that reads back to the same double; always has a '.' or is inf/nan, so that
// YAML 1.1 readers (PyYAML) see a float too: 1 -> "1.0", 1e-05 -> "1.0e-05".
std::string format_double(double value) {
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  std::string text(buffer, result.ptr);
  if (!std::isfinite(value)) return text;
  std::size_t exponent = text.find('e');
  std::string mantissa = text.substr(0, exponent);
  if (mantissa.find('.') == std::string::npos) mantissa += ".0";
  return exponent == std::string::npos ? mantissa : mantissa + text.substr(exponent);
}

// Numbers in check descriptions: integers without a fraction ("1", "0.5").
std::string format_bound(double value) {
  if (value == std::floor(value) && std::fabs(value) < 1e15) return std::to_string(static_cast<long long>(value));
  char buffer[64];
  auto result = std::to_chars(buffer, buffer + sizeof(buffer), value);
  return std::string(buffer, result.ptr);
}

std::optional<double> as_double(const FieldValue& value) {
  if (const auto* i = std::get_if<std::int64_t>(&value)) return static_cast<double>(*i);
  if (const auto* d = std::get_if<double>(&value)) return *d;
  return std::nullopt;
}

std::string join(const std::vector<std::string>& items, std::string_view separator) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i) out += separator;
    out += items[i];
  }
  return out;
}

std::optional<bool> parse_bool(std::string_view text) {
  std::string t = lower(text);
  if (t == "true" || t == "yes" || t == "on") return true;
  if (t == "false" || t == "no" || t == "off") return false;
  return std::nullopt;
}

std::optional<std::int64_t> parse_integer(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  std::int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<double> parse_number(std::string_view text) {
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double value = 0.0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size() || !std::isfinite(value)) {
    return std::nullopt;
  }
  return value;
}

std::optional<std::vector<std::string>> parse_list(std::string_view text) {
  text = trim(text);
  if (text.size() >= 2 && text.front() == '[' && text.back() == ']') text = trim(text.substr(1, text.size() - 2));
  std::vector<std::string> items;
  if (text.empty()) return items;
  while (true) {
    std::size_t comma = text.find(',');
    std::string_view item = trim(text.substr(0, comma));
    if (item.size() >= 2 && (item.front() == '"' || item.front() == '\'') && item.back() == item.front()) {
      item = item.substr(1, item.size() - 2);
    }
    if (item.empty()) return std::nullopt;
    items.emplace_back(item);
    if (comma == std::string_view::npos) break;
    text = text.substr(comma + 1);
  }
  return items;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      std::size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

}  // namespace

std::string_view field_type_name(FieldType type) {
  switch (type) {
    case FieldType::boolean:
      return "bool";
    case FieldType::integer:
      return "int";
    case FieldType::number:
      return "float";
    case FieldType::text:
      return "string";
    case FieldType::text_list:
      return "list of strings";
    case FieldType::choice:
      return "choice";
    case FieldType::auto_boolean:
      return "bool or auto";
    case FieldType::auto_number:
      return "float or auto";
  }
  return "?";
}

std::string format_field_value(const FieldValue& value) {
  struct Printer {
    std::string operator()(std::monostate) const { return "auto"; }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(std::int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return format_double(d); }
    std::string operator()(const std::string& s) const { return s.empty() ? "\"\"" : s; }
    std::string operator()(const std::vector<std::string>& list) const {
      std::string text = "[";
      text.append(join(list, ", ")).append("]");
      return text;
    }
  };
  return std::visit(Printer{}, value);
}

FieldCheck at_least(double low) {
  return {">= " + format_bound(low), [low](const FieldValue& v) {
            auto d = as_double(v);
            return !d || *d >= low;
          }};
}

FieldCheck greater_than(double low) {
  return {"> " + format_bound(low), [low](const FieldValue& v) {
            auto d = as_double(v);
            return !d || *d > low;
          }};
}

FieldCheck in_range(double low, double high, bool low_closed, bool high_closed) {
  std::string description = "in " + std::string(low_closed ? "[" : "(") + format_bound(low) + ", " +
                            format_bound(high) + (high_closed ? "]" : ")");
  return {description, [=](const FieldValue& v) {
            auto d = as_double(v);
            if (!d) return true;
            bool above = low_closed ? *d >= low : *d > low;
            bool below = high_closed ? *d <= high : *d < high;
            return above && below;
          }};
}

FieldCheck non_empty() {
  return {"non-empty", [](const FieldValue& v) {
            const auto* s = std::get_if<std::string>(&v);
            return !s || !s->empty();
          }};
}

bool FieldInfo::matches(std::string_view key) const {
  return key == name || std::find(aliases.begin(), aliases.end(), key) != aliases.end();
}

std::optional<FieldValue> parse_field_text(const FieldInfo& info, std::string_view text, std::string* problem) {
  auto fail = [&](std::string_view expected) -> std::optional<FieldValue> {
    *problem = "expected " + std::string(expected) + ", got '" + excerpt(text) + "'";
    return std::nullopt;
  };
  switch (info.type) {
    case FieldType::boolean:
      if (auto b = parse_bool(trim(text))) return FieldValue(*b);
      return fail("a boolean (true or false)");
    case FieldType::integer:
      if (auto i = parse_integer(trim(text))) return FieldValue(*i);
      return fail("an integer");
    case FieldType::number:
      if (auto d = parse_number(trim(text))) return FieldValue(*d);
      return fail("a number");
    case FieldType::text:
      return FieldValue(std::string(text));
    case FieldType::choice:  // matched without regard to case, kept as the table spells it
      for (const std::string& name : info.allowed) {
        if (lower(name) == lower(text)) return FieldValue(name);
      }
      return FieldValue(std::string(text));
    case FieldType::text_list:
      if (auto list = parse_list(text)) return FieldValue(*list);
      return fail("a list of strings like [a, b]");
    case FieldType::auto_boolean:
      if (lower(trim(text)) == "auto") return FieldValue(std::monostate{});
      if (auto b = parse_bool(trim(text))) return FieldValue(*b);
      return fail("true, false or auto");
    case FieldType::auto_number:
      if (lower(trim(text)) == "auto") return FieldValue(std::monostate{});
      if (auto d = parse_number(trim(text))) return FieldValue(*d);
      return fail("a number or auto");
  }
  return fail("a value");
}

std::string field_value_problem(const FieldInfo& info, const FieldValue& value) {
  // A NUL byte would end the string in YAML output, paths and messages: refused wherever it is.
  const auto has_nul = [](const std::string& s) { return s.find('\0') != std::string::npos; };
  if (const auto* text = std::get_if<std::string>(&value); text && has_nul(*text)) {
    return "contains a NUL byte (\\0), which no key accepts";
  }
  if (const auto* list = std::get_if<std::vector<std::string>>(&value)) {
    for (const auto& item : *list) {
      if (has_nul(item)) return "has a member that contains a NUL byte (\\0), which no key accepts";
    }
  }
  if (info.type == FieldType::integer) {
    const auto* i = std::get_if<std::int64_t>(&value);
    if (!i) return "has the wrong type (expected an integer)";
    if (*i < info.min_integer || *i > info.max_integer) {
      return "must be between " + std::to_string(info.min_integer) + " and " + std::to_string(info.max_integer) +
             ", got " + std::to_string(*i);
    }
  }
  if (info.type == FieldType::choice) {
    const auto& s = std::get<std::string>(value);
    if (std::find(info.allowed.begin(), info.allowed.end(), s) == info.allowed.end()) {
      return "must be one of " + join(info.allowed, ", ") + ", got '" + excerpt(s) + "'";
    }
  }
  if (info.type == FieldType::text_list) {
    const auto& list = std::get<std::vector<std::string>>(value);
    std::set<std::string> seen;
    for (const auto& item : list) {
      if (!info.allowed.empty() && std::find(info.allowed.begin(), info.allowed.end(), item) == info.allowed.end()) {
        return "members must be among " + join(info.allowed, ", ") + ", got '" + excerpt(item) + "'";
      }
      if (!info.repeats && !seen.insert(item).second) return "lists '" + item + "' twice";
    }
  }
  if (!info.check.description.empty() && !std::holds_alternative<std::monostate>(value) && !info.check.accepts(value)) {
    return "must be " + info.check.description + ", got " + format_field_value(value);
  }
  return "";
}

std::string describe_keys(const std::vector<const FieldInfo*>& fields) {
  std::vector<std::string> keys;
  keys.reserve(fields.size());
  for (const FieldInfo* f : fields) {
    keys.push_back(f->aliases.empty() ? f->name : f->name + " (alias " + join(f->aliases, ", ") + ")");
  }
  return join(keys, ", ");
}

std::string closest_name(const std::vector<std::string>& names, std::string_view key) {
  std::size_t limit = key.size() <= 4 ? 1 : (key.size() <= 10 ? 2 : 3);
  std::string best;
  std::size_t best_distance = limit + 1;
  for (const auto& n : names) {
    std::size_t d = edit_distance(key, n);
    if (d < best_distance) {
      best_distance = d;
      best = n;
    }
  }
  return best;
}

std::string closest_key(const std::vector<const FieldInfo*>& fields, std::string_view key) {
  std::vector<std::string> names;
  for (const FieldInfo* f : fields) {
    names.push_back(f->name);
    names.insert(names.end(), f->aliases.begin(), f->aliases.end());
  }
  return closest_name(names, key);
}

void throw_field_problem(std::string_view section, const FieldInfo& info, const std::string& problem) {
  MYRIAD_THROW(section << "." << info.name << ": " << problem);
}

std::string did_you_mean(const std::string& closest) {
  return closest.empty() ? "" : " (did you mean '" + closest + "'?)";
}

}  // namespace myriad
