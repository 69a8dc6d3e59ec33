// check_shard_folder: a shard folder against its manifest.json (shard_manifest.h).
#include "myriad/data/shard_manifest.h"

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <nlohmann/json.hpp>
#include <set>

#include "myriad/data/token_shard.h"

namespace myriad::data {

namespace {

namespace fs = std::filesystem;

}  // namespace

std::uint32_t stored_file_crc(StoredFileReader& reader) {
  std::vector<char> buffer(std::size_t{1} << 20);
  std::uint32_t crc = 0;
  const std::uint64_t size = reader.size();
  for (std::uint64_t at = 0; at < size; at += buffer.size()) {
    const auto n = static_cast<std::size_t>(std::min<std::uint64_t>(buffer.size(), size - at));
    reader.read_at(at, buffer.data(), n);
    crc = crc32(buffer.data(), n, crc);
  }
  return crc;
}

std::string ShardFolderCheck::describe() const {
  std::string text;
  for (const std::string& p : problems) text += "\n  " + p;
  return text;
}

ShardFolderCheck check_shard_folder(const std::string& directory, bool check_crc, const AtRest& at_rest) {
  ShardFolderCheck check;
  const fs::path manifest_path = fs::path(directory) / "manifest.json";
  std::error_code error;
  if (!fs::is_regular_file(manifest_path, error)) return check;
  check.has_manifest = true;
  nlohmann::json manifest;
  try {
    std::ifstream in(manifest_path);
    manifest = nlohmann::json::parse(in);
    const nlohmann::json& splits = manifest.at("splits");
    for (const char* split : {"train", "val"}) {
      if (!splits.contains(split)) continue;
      std::set<std::string> listed;
      for (const nlohmann::json& shard : splits.at(split).at("shards")) {
        const std::string name = shard.at("file").get<std::string>();
        listed.insert(name);
        const fs::path path = fs::path(directory) / name;
        if (name.find('/') != std::string::npos || name == ".." || !fs::is_regular_file(path, error)) {
          check.problems.push_back(name + ": listed in manifest.json, missing from the folder");
          continue;
        }
        // The shard's own bytes: an encrypted one's decrypted (a missing key throws, naming it).
        const std::unique_ptr<StoredFileReader> reader = at_rest.open(path.string());
        const std::uint64_t bytes = reader->size();
        const std::uint64_t recorded = shard.at("bytes").get<std::uint64_t>();
        if (bytes != recorded) {
          check.problems.push_back(name + ": " + std::to_string(bytes) + " bytes, manifest.json records " +
                                   std::to_string(recorded) + " (truncated or replaced)");
        } else if (check_crc && stored_file_crc(*reader) != shard.at("crc32").get<std::uint32_t>()) {
          check.problems.push_back(name + ": its CRC-32 differs from manifest.json's (the file is corrupt)");
        }
      }
      const std::string prefix = std::string(split) + "_";
      for (const fs::directory_entry& entry : fs::directory_iterator(directory, error)) {
        const std::string name = entry.path().filename().string();
        if (name.starts_with(prefix) && name.ends_with(".bin") && listed.count(name) == 0)
          check.problems.push_back(name + ": in the folder, not listed in manifest.json (from another tokenize?)");
      }
    }
  } catch (const nlohmann::json::exception& e) {
    check.problems.push_back("manifest.json is not a shard manifest: " + std::string(e.what()));
  }
  return check;
}

}  // namespace myriad::data
