// Internal: little-endian field access and atomic file writing for the data layer's file formats
// (token shards, block-compressed token shards).
//
// TempFile owns "<path>.tmp" and removes it unless committed: write, sync_and_close, commit_as
// (rename over the final path), then sync_directory_of makes the rename durable — so the final
// path is either absent (or its old content) or the complete new file, never a partial one.
// StagedStoredFile does the same for a file written sequentially through an AtRest (in clear or
// encrypted).
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "myriad/data/at_rest.h"

namespace myriad::data::detail {

inline std::uint32_t load_u32(const unsigned char* p) {
  return static_cast<std::uint32_t>(p[0]) | static_cast<std::uint32_t>(p[1]) << 8 |
         static_cast<std::uint32_t>(p[2]) << 16 | static_cast<std::uint32_t>(p[3]) << 24;
}

inline std::uint64_t load_u64(const unsigned char* p) {
  return static_cast<std::uint64_t>(load_u32(p)) | static_cast<std::uint64_t>(load_u32(p + 4)) << 32;
}

inline void store_u32(unsigned char* p, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

inline void store_u64(unsigned char* p, std::uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

class TempFile {
 public:
  explicit TempFile(std::string path);  // creates (truncates) the file; throws naming it
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile();

  void write_at(const void* data, std::size_t size, off_t offset);
  void sync_and_close();
  void commit_as(const std::string& final_path);

 private:
  std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

// "<path>.tmp" written through `at_rest` (encrypted in chunks of `chunk_bytes` when it encrypts),
// removed unless commit() — finish, rename over `path`, fsync the directory — succeeds.
class StagedStoredFile {
 public:
  StagedStoredFile(std::string path, const AtRest& at_rest, std::size_t chunk_bytes);
  StagedStoredFile(const StagedStoredFile&) = delete;
  StagedStoredFile& operator=(const StagedStoredFile&) = delete;
  ~StagedStoredFile();

  void write(const void* data, std::size_t n) { out_->write(data, n); }
  void commit();

 private:
  std::string path_, staged_;
  std::unique_ptr<StoredFileWriter> out_;
  bool committed_ = false;
};

// fsync of the directory holding `path` (best effort: some file systems refuse it).
void sync_directory_of(const std::string& path);

// The whole file mapped read-only (the caller munmaps it); throws naming `where` when it cannot
// be opened, stat'ed or mapped, or holds fewer than `header_bytes` bytes ("short header").
struct Mapping {
  void* address = nullptr;
  std::size_t bytes = 0;
};
Mapping map_read_only(const std::string& path, const std::string& where, std::size_t header_bytes);

}  // namespace myriad::data::detail
