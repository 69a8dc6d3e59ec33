// config_reference_markdown: the key tables of docs/config.md, generated from the field registries
// so the document cannot drift from the code (a test compares the two).
#include <sstream>

#include "myriad/config/run_config.h"

namespace myriad {

namespace {

// Markdown-safe text for a table cell: escape the column separator and '<' (not an HTML tag).
std::string cell(std::string_view text) {
  std::string out;
  for (char c : text) {
    if (c == '|' || c == '<') out += '\\';
    out += c;
  }
  return out;
}

std::string code_list(const std::vector<std::string>& items) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) out += (i ? ", `" : "`") + items[i] + "`";
  return out;
}

std::string allowed_cell(const FieldInfo& info) {
  std::string out;
  if (info.type == FieldType::choice) out = code_list(info.allowed);
  if (info.type == FieldType::text_list && !info.allowed.empty()) out = "subset of " + code_list(info.allowed);
  if (info.type == FieldType::auto_boolean || info.type == FieldType::auto_number) out = "`auto` or ";
  if (!info.check.description.empty()) {
    out += cell(info.check.description);
  } else if (info.type == FieldType::auto_boolean) {
    out += "`true`, `false`";
  } else if (info.type == FieldType::auto_number) {
    out += "a number";
  }
  return out.empty() ? "any" : out;
}

template <typename S>
void write_section(std::ostringstream& out) {
  out << "### `" << S::kSection << "` — " << S::kSectionMeaning << "\n\n";
  out << "| key | type | default | allowed | meaning |\n";
  out << "|---|---|---|---|---|\n";
  const S defaults;
  for (const auto& field : S::fields()) {
    out << "| `" << field.name << "`";
    if (!field.aliases.empty()) out << " (alias " << code_list(field.aliases) << ")";
    out << " | " << field_type_name(field.type) << " | `" << format_field_value(field.get(defaults)) << "` | "
        << allowed_cell(field) << " | " << cell(field.meaning) << " |\n";
  }
  out << "\n";
}

}  // namespace

std::string config_reference_markdown() {
  std::ostringstream out;
  RunConfig defaults;
  for_each_section(defaults, [&](const auto& section) { write_section<std::decay_t<decltype(section)>>(out); });
  return out.str();
}

}  // namespace myriad
