// RunConfig::to_yaml: every section and key in registry order, values as stored (so the text reads
// back to an equal RunConfig); a key whose stored value is derived (0, auto, "") carries the value it
// resolves to as a trailing comment. Numbers are written with the shortest round-trip text.
#include <yaml-cpp/yaml.h>

#include "myriad/config/run_config.h"

namespace myriad {

namespace {

void emit_value(YAML::Emitter& out, const FieldInfo& info, const FieldValue& value) {
  if (const auto* b = std::get_if<bool>(&value)) {
    out << *b;
  } else if (const auto* i = std::get_if<std::int64_t>(&value)) {
    out << static_cast<long long>(*i);
  } else if (const auto* list = std::get_if<std::vector<std::string>>(&value)) {
    out << YAML::Flow << YAML::BeginSeq;
    for (const auto& item : *list) out << item;
    out << YAML::EndSeq;
  } else if (const auto* s = std::get_if<std::string>(&value); s && info.type == FieldType::text) {
    out << YAML::DoubleQuoted << *s;  // paths and prompts: always quoted, never mistaken for a number
  } else {
    out << format_field_value(value);  // choice, number, auto
  }
}

template <typename S>
void emit_section(YAML::Emitter& out, const S& stored, const S& resolved) {
  out << YAML::Key << std::string(S::kSection) << YAML::Value << YAML::BeginMap;
  for (const auto& field : S::fields()) {
    FieldValue value = field.get(stored);
    FieldValue derived = field.get(resolved);
    out << YAML::Key << field.name << YAML::Value;
    emit_value(out, field, value);
    if (derived != value) out << YAML::Comment("resolved: " + format_field_value(derived));
  }
  out << YAML::EndMap;
}

}  // namespace

std::string RunConfig::to_yaml() const {
  const RunConfig derived = resolved();
  YAML::Emitter out;
  out << YAML::Comment("myriad run configuration, every key (docs/config.md); 'resolved:' shows derived values");
  out << YAML::BeginMap;
  for_each_section(*this, [&](const auto& section) {
    using S = std::decay_t<decltype(section)>;
    emit_section(out, section, section_of<S>(derived));
  });
  out << YAML::EndMap;
  return std::string(out.c_str()) + "\n";
}

}  // namespace myriad
