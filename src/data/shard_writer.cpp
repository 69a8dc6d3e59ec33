// Atomic token shard writer (write .tmp, fsync, rename, fsync directory) and the numbered
// shard sequence writer.
#include "myriad/data/shard_writer.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "id_range_check.h"
#include "myriad/core/error.h"
#include "myriad/data/token_shard.h"

namespace myriad::data {

namespace {

// Owns the file descriptor of "<path>.tmp" and removes the file unless committed.
class TempFile {
 public:
  explicit TempFile(std::string path) : path_(std::move(path)) {
    fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    MYRIAD_CHECK(fd_ >= 0, "cannot create '" << path_ << "': " << std::strerror(errno));
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(path_.c_str());
  }

  void write_at(const void* data, std::size_t size, off_t offset) {
    const auto* p = static_cast<const char*>(data);
    while (size > 0) {
      ssize_t n = ::pwrite(fd_, p, size, offset);
      if (n < 0 && errno == EINTR) continue;
      MYRIAD_CHECK(n > 0, "cannot write '" << path_ << "': " << (n < 0 ? std::strerror(errno) : "no progress"));
      p += n;
      size -= static_cast<std::size_t>(n);
      offset += n;
    }
  }

  void sync_and_close() {
    MYRIAD_CHECK(::fsync(fd_) == 0, "cannot fsync '" << path_ << "': " << std::strerror(errno));
    int result = ::close(fd_);
    fd_ = -1;
    MYRIAD_CHECK(result == 0, "cannot close '" << path_ << "': " << std::strerror(errno));
  }

  void commit_as(const std::string& final_path) {
    MYRIAD_CHECK(::rename(path_.c_str(), final_path.c_str()) == 0,
                 "cannot rename '" << path_ << "' to '" << final_path << "': " << std::strerror(errno));
    committed_ = true;
  }

 private:
  std::string path_;
  int fd_ = -1;
  bool committed_ = false;
};

// Makes the rename durable. Best effort: some file systems refuse fsync on directories.
void sync_directory_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string directory = parent.empty() ? std::string(".") : parent.string();
  int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

}  // namespace

void write_token_shard(const std::string& path, std::span<const std::int32_t> tokens, std::uint32_t vocab_size) {
  MYRIAD_CHECK(vocab_size > 0 && vocab_size <= 0x7FFFFFFFu,
               "write_token_shard '" << path << "': vocab_size " << vocab_size << " must lie in [1, 2^31)");
  const auto count = static_cast<std::int64_t>(tokens.size());
  std::int64_t bad = detail::first_id_out_of_range(tokens.data(), count, vocab_size);
  MYRIAD_CHECK(bad < 0, "write_token_shard '" << path << "': token id " << tokens[static_cast<std::size_t>(bad)]
                                              << " at position " << bad << " is out of range for vocab_size "
                                              << vocab_size);

  ShardHeader header;
  header.dtype = shard_dtype_for_vocab(vocab_size);
  header.vocab_size = vocab_size;
  header.token_count = static_cast<std::uint64_t>(count);

  TempFile file(path + ".tmp");
  // Payload first (converted in bounded chunks, CRC as it goes), then the header at offset 0.
  const std::size_t token_bytes = shard_dtype_size(header.dtype);
  constexpr std::int64_t kChunk = 1 << 20;
  std::vector<std::uint16_t> narrow;
  off_t offset = static_cast<off_t>(kShardHeaderBytes);
  std::uint32_t crc = 0;
  for (std::int64_t begin = 0; begin < count; begin += kChunk) {
    const std::int64_t n = std::min(kChunk, count - begin);
    const void* chunk = tokens.data() + begin;
    if (header.dtype == ShardDType::u16) {
      narrow.resize(static_cast<std::size_t>(n));
      for (std::int64_t i = 0; i < n; ++i) narrow[i] = static_cast<std::uint16_t>(tokens[begin + i]);
      chunk = narrow.data();
    }
    const std::size_t bytes = static_cast<std::size_t>(n) * token_bytes;
    crc = crc32(chunk, bytes, crc);
    file.write_at(chunk, bytes, offset);
    offset += static_cast<off_t>(bytes);
  }
  header.checksum = crc;
  unsigned char header_bytes[kShardHeaderBytes];
  encode_shard_header(header, header_bytes);
  file.write_at(header_bytes, kShardHeaderBytes, 0);
  file.sync_and_close();
  file.commit_as(path);
  sync_directory_of(path);
}

std::string shard_path(const std::string& directory, const std::string& prefix, std::int64_t index) {
  char name[32];
  std::snprintf(name, sizeof(name), "_%06lld.bin", static_cast<long long>(index));
  return (std::filesystem::path(directory) / (prefix + name)).string();
}

ShardSequenceWriter::ShardSequenceWriter(std::string directory, std::string prefix, std::uint32_t vocab_size,
                                         std::int64_t max_tokens)
    : directory_(std::move(directory)), prefix_(std::move(prefix)), vocab_size_(vocab_size), max_tokens_(max_tokens) {
  MYRIAD_CHECK(max_tokens_ > 0, "ShardSequenceWriter '" << directory_ << "/" << prefix_
                                                        << "': max_tokens must be positive, got " << max_tokens_);
}

void ShardSequenceWriter::append(std::span<const std::int32_t> tokens) {
  while (!tokens.empty()) {
    auto room = static_cast<std::size_t>(max_tokens_ - static_cast<std::int64_t>(buffer_.size()));
    std::size_t take = std::min(room, tokens.size());
    buffer_.insert(buffer_.end(), tokens.begin(), tokens.begin() + static_cast<std::ptrdiff_t>(take));
    tokens = tokens.subspan(take);
    if (static_cast<std::int64_t>(buffer_.size()) == max_tokens_) flush();
  }
}

void ShardSequenceWriter::finish() {
  if (!buffer_.empty()) flush();
}

void ShardSequenceWriter::flush() {
  std::string path = shard_path(directory_, prefix_, static_cast<std::int64_t>(paths_.size()));
  write_token_shard(path, buffer_, vocab_size_);
  paths_.push_back(path);
  written_ += static_cast<std::int64_t>(buffer_.size());
  buffer_.clear();
}

}  // namespace myriad::data
