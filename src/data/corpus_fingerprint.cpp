// Corpus fingerprint: per-file size, modification time and content CRC-32 (see the header).
#include "myriad/data/corpus_fingerprint.h"

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <vector>

#include "myriad/core/error.h"
#include "myriad/data/token_shard.h"

namespace fs = std::filesystem;

namespace myriad::data {

namespace {

std::uint32_t file_crc32(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MYRIAD_CHECK(in, "corpus file '" << path << "' cannot be read");
  std::vector<char> buffer(1 << 20);
  std::uint32_t crc = 0;
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    crc = crc32(buffer.data(), static_cast<std::size_t>(in.gcount()), crc);
  }
  MYRIAD_CHECK(!in.bad(), "corpus file '" << path << "' cannot be read to the end");
  return crc;
}

// path -> the rest of its line.
std::map<std::string, std::string> by_file(const std::string& fingerprint) {
  std::map<std::string, std::string> files;
  std::istringstream lines(fingerprint);
  std::string line;
  while (std::getline(lines, line)) {
    const std::size_t size_at = line.rfind(" size ");
    if (line.rfind("file ", 0) != 0 || size_at == std::string::npos) continue;
    files[line.substr(5, size_at - 5)] = line.substr(size_at + 1);
  }
  return files;
}

}  // namespace

std::string corpus_fingerprint(const std::vector<std::string>& files) {
  std::ostringstream out;
  for (const std::string& path : files) {
    std::error_code error;
    const std::uintmax_t size = fs::file_size(path, error);
    MYRIAD_CHECK(!error, "corpus file '" << path << "': " << error.message());
    const fs::file_time_type written = fs::last_write_time(path, error);
    MYRIAD_CHECK(!error, "corpus file '" << path << "': " << error.message());
    const auto mtime = std::chrono::file_clock::to_sys(written).time_since_epoch();
    char crc[16];
    std::snprintf(crc, sizeof crc, "%08x", file_crc32(path));
    out << "file " << path << " size " << size << " mtime "
        << std::chrono::duration_cast<std::chrono::nanoseconds>(mtime).count() << " crc32 " << crc << "\n";
  }
  return out.str();
}

std::string first_difference(const std::string& before, const std::string& now) {
  const auto old_files = by_file(before), new_files = by_file(now);
  for (const auto& [path, rest] : new_files) {
    const auto found = old_files.find(path);
    if (found == old_files.end()) return path + " is new";
    if (found->second != rest) {
      std::string change = path + " changed (";
      change.append(found->second).append(" -> ").append(rest).append(")");
      return change;
    }
  }
  for (const auto& [path, rest] : old_files) {
    if (new_files.count(path) == 0) return path + " is gone";
  }
  const auto file_lines = [](const std::string& fingerprint) {
    std::vector<std::string> lines;
    std::istringstream in(fingerprint);
    for (std::string line; std::getline(in, line);) {
      if (line.rfind("file ", 0) == 0) lines.push_back(line);
    }
    return lines;
  };
  return file_lines(before) == file_lines(now) ? "" : "the order of the files changed";
}

}  // namespace myriad::data
