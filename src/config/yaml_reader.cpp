// Reading a RunConfig: YAML files and text, through the field registries ("section.key=value"
// overrides are read in config_keys.cpp). Every error is a myriad::Error of the form
// "<source>:<line>: <section>.<key>: <what>" (the line is the key's, 1-based, when yaml-cpp
// knows it) that lists what would be accepted.
// Values are type-checked and per-key checked (range, choice) here; cross-key checks wait for
// RunConfig::validate() because later overrides may still change the other keys.
#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>

#include <yaml-cpp/yaml.h>

#include "myriad/config/run_config.h"
#include "myriad/core/error.h"
#include "yaml_documents.h"

namespace myriad {

namespace {

// Where a problem is: "<source>:<line>" or just "<source>".
std::string where(const std::string& source, const YAML::Mark& mark) {
  if (mark.is_null() || mark.line < 0) return source;
  return source + ":" + std::to_string(mark.line + 1);
}

std::string node_kind(const YAML::Node& node) {
  switch (node.Type()) {
    case YAML::NodeType::Sequence:
      return "a list";
    case YAML::NodeType::Map:
      return "a map";
    case YAML::NodeType::Null:
      return "an empty value";
    default:
      return "'" + excerpt(node.Scalar()) + "'";
  }
}

// The value of `node` as the field's type, or throws naming `at` and `path`.
FieldValue read_value(const FieldInfo& info, const YAML::Node& node, const std::string& at, const std::string& path) {
  std::string problem;
  std::optional<FieldValue> value;
  if (node.IsScalar()) {
    value = parse_field_text(info, node.Scalar(), &problem);
  } else if (node.IsNull()) {
    switch (info.type) {
      case FieldType::text:
        value = FieldValue(std::string());
        break;
      case FieldType::text_list:
        value = FieldValue(std::vector<std::string>());
        break;
      case FieldType::auto_boolean:
      case FieldType::auto_number:
        value = FieldValue(std::monostate{});
        break;
      default:
        problem = "expected a value of type " + std::string(field_type_name(info.type)) + ", got an empty value";
    }
  } else if (node.IsSequence() && info.type == FieldType::text_list) {
    std::vector<std::string> items;
    for (const auto& item : node) {
      if (item.IsMap() && item["path"] && item["path"].IsScalar()) {  // {path: P, weight: W} -> "P@W"
        std::string member = item["path"].Scalar();
        for (const auto& entry : item) {
          const std::string key = entry.first.Scalar();
          if (key == "weight" && entry.second.IsScalar()) {
            member += "@" + entry.second.Scalar();
          } else if (key != "path") {
            problem = "a {path, weight} member has the unknown key '" + key + "'";
          }
        }
        items.push_back(member);
        continue;
      }
      if (!item.IsScalar()) {
        problem = "expected a list of strings, got a member that is " + node_kind(item);
        break;
      }
      items.push_back(item.Scalar());
    }
    if (problem.empty()) value = FieldValue(items);
  } else {
    problem = "expected a value of type " + std::string(field_type_name(info.type)) + ", got " + node_kind(node);
  }
  if (value && problem.empty()) problem = field_value_problem(info, *value);
  MYRIAD_CHECK(problem.empty(), at << ": " << path << ": " << problem);
  return *value;
}

// Whether some key of S is spelled "<prefix>.<name>" (a nested map such as model.attention).
template <typename S>
bool has_keys_under(const std::string& prefix) {
  for (const auto& field : S::fields()) {
    if (std::string_view(field.name).starts_with(prefix + ".")) return true;
  }
  return false;
}

// Reads one section map into `section`; a key whose value is a map and whose section has keys
// under it (attention: {kind: ...}) reads that map's entries as "<key>.<entry>". Unknown keys,
// repeated keys and a key given under two of its spellings are errors.
template <typename S>
void read_section(S& section, const YAML::Node& node, const std::string& source) {
  const std::string name(S::kSection);
  const std::string path_prefix = name + ".";  // of the keys' paths in messages ("model.n_layer")
  if (node.IsNull()) return;                   // "sample:" with nothing under it
  MYRIAD_CHECK(node.IsMap(), where(source, node.Mark())
                                 << ": " << name << ": expected a map of keys, got " << node_kind(node));
  std::map<std::string, std::pair<std::string, int>> seen;  // canonical name -> (spelling, line)
  auto read_map = [&](auto&& self, const YAML::Node& map, const std::string& prefix) -> void {
    for (auto it = map.begin(); it != map.end(); ++it) {
      const YAML::Node key_node = it->first;  // copies: `it->` hands out a temporary proxy
      const YAML::Node value_node = it->second;
      const std::string at = where(source, key_node.Mark());
      MYRIAD_CHECK(key_node.IsScalar(),
                   at << ": " << name << ": keys must be plain names, got " << node_kind(key_node));
      const std::string key = prefix + key_node.Scalar();
      const Field<S>* field = find_field(S::fields(), key);
      if (!field && value_node.IsMap() && has_keys_under<S>(key)) {
        self(self, value_node, key + ".");
        continue;
      }
      if (const RefusedKey* refused = find_refused_key<S>(key); !field && refused) {
        MYRIAD_THROW(at << ": " << name << "." << key << ": " << refused->reason);
      }
      if (!field) {
        auto infos = field_infos(S::fields());
        MYRIAD_THROW(at << ": unknown key '" << name << "." << key << "'" << did_you_mean(closest_key(infos, key))
                        << "; keys of section '" << name << "': " << describe_keys(infos));
      }
      auto [previous, inserted] = seen.emplace(field->name, std::make_pair(key, key_node.Mark().line + 1));
      if (!inserted) {
        const auto& [spelling, line] = previous->second;
        if (spelling == key) {
          MYRIAD_THROW(at << ": " << name << "." << key << " is given twice (also on line " << line << ")");
        }
        MYRIAD_THROW(at << ": " << name << "." << key << " and " << name << "." << spelling << " (line " << line
                        << ") are the same key (" << describe_keys({field}) << "); give only one");
      }
      field->set(section, read_value(*field, value_node, at, path_prefix + key));
    }
  };
  read_map(read_map, node, "");
}

RunConfig read_root(const YAML::Node& root, const std::string& source) {
  RunConfig config;
  if (root.IsNull()) return config;
  MYRIAD_CHECK(root.IsMap(), where(source, root.Mark()) << ": a config is a map of sections (" << describe_sections()
                                                        << "), got " << node_kind(root));
  std::map<std::string, int> seen;  // section -> line
  std::vector<std::string> names;
  for_each_section(config, [&](const auto& section) { names.emplace_back(section.kSection); });
  for (auto it = root.begin(); it != root.end(); ++it) {
    const YAML::Node key_node = it->first;  // copies: `it->` hands out a temporary proxy
    const YAML::Node value_node = it->second;
    const std::string at = where(source, key_node.Mark());
    MYRIAD_CHECK(key_node.IsScalar(), at << ": section names must be plain names, got " << node_kind(key_node));
    const std::string& key = key_node.Scalar();  // key_node keeps the scalar alive
    MYRIAD_CHECK(std::find(names.begin(), names.end(), key) != names.end(),
                 at << ": unknown section '" << key << "'" << did_you_mean(closest_name(names, key))
                    << "; sections: " << describe_sections());
    auto [previous, inserted] = seen.emplace(key, key_node.Mark().line + 1);
    MYRIAD_CHECK(inserted, at << ": section '" << key << "' is given twice (also on line " << previous->second << ")");
    for_each_section(config, [&](auto& section) {
      if (section.kSection == key) read_section(section, value_node, source);
    });
  }
  return config;
}

// Refuses text whose flow collections ([ ], { }) nest deeper than any config does, before the YAML
// parser recurses into them (a deep enough nesting exhausts its stack or ends in an opaque error).
void check_nesting_depth(const std::string& text, const std::string& source_name) {
  constexpr int kMaxDepth = 64;
  int depth = 0, line = 1;
  char quote = 0;
  for (const char c : text) {
    if (c == '\n') ++line;
    if (quote != 0) {
      if (c == quote) quote = 0;
      continue;
    }
    if (c == '"' || c == '\'') {
      quote = c;
    } else if (c == '[' || c == '{') {
      MYRIAD_CHECK(++depth <= kMaxDepth, source_name << ":" << line << ": invalid YAML: brackets nest more than "
                                                     << kMaxDepth
                                                     << " levels deep; a config is sections of keys "
                                                        "nested a few levels at most (is this the right file?)");
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    } else if (c == '#' && depth == 0) {
      quote = '\n';  // a comment: skip to the end of the line
    }
  }
}

}  // namespace

RunConfig RunConfig::from_yaml_string(const std::string& text, const std::string& source_name) {
  check_nesting_depth(text, source_name);
  const std::vector<YAML::Node> documents = detail::load_yaml_documents(text, source_name);
  const auto has_content = [](const YAML::Node& d) { return !d.IsNull(); };
  const auto filled = std::count_if(documents.begin(), documents.end(), has_content);
  MYRIAD_CHECK(filled > 0, source_name << ": the config is empty (no sections); a config is a map of sections ("
                                       << describe_sections() << "), e.g. 'training: {steps: 100}'");
  MYRIAD_CHECK(filled == 1, where(source_name, documents[1].Mark())
                                << ": the file holds " << filled
                                << " YAML documents (separated by '---'); a config is one document: merge them or "
                                   "keep one");
  return read_root(*std::find_if(documents.begin(), documents.end(), has_content), source_name);
}

RunConfig RunConfig::from_yaml_file(const std::string& path) {
  std::error_code error;
  const auto status = std::filesystem::status(path, error);
  MYRIAD_CHECK(std::filesystem::exists(status), "config file '" << path << "' does not exist");
  MYRIAD_CHECK(!std::filesystem::is_directory(status),
               "config file '" << path << "' is a directory; --config takes a YAML file, e.g. configs/gpt2_tiny.yaml");
  // A device (/dev/zero) or a FIFO would be read without bound or block: only regular files.
  MYRIAD_CHECK(std::filesystem::is_regular_file(status),
               "config file '" << path
                               << "' is not a regular file (a device, FIFO or socket); --config takes a "
                                  "YAML file, e.g. configs/gpt2_tiny.yaml");
  constexpr std::uintmax_t kMaxConfigBytes = 16u << 20;  // a config is a few KiB; anything this large is a mistake
  const std::uintmax_t bytes = std::filesystem::file_size(path, error);
  MYRIAD_CHECK(!error, "cannot read the size of config file '" << path << "': " << error.message());
  MYRIAD_CHECK(bytes <= kMaxConfigBytes, "config file '" << path << "' holds " << bytes
                                                         << " bytes; a config is at most " << kMaxConfigBytes
                                                         << " bytes (is it the right file?)");
  std::ifstream in(path, std::ios::binary);
  MYRIAD_CHECK(in.good(), "cannot open config file '" << path << "'");
  std::ostringstream text;
  text << in.rdbuf();
  MYRIAD_CHECK(!in.bad(), "cannot read config file '" << path << "'");
  return from_yaml_string(text.str(), path);
}

}  // namespace myriad
