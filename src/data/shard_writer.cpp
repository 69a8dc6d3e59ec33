// Atomic token shard writer (write .tmp — in clear or encrypted —, fsync, rename, fsync directory)
// and the numbered shard sequence writer.
#include "myriad/data/shard_writer.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>

#include "binary_io.h"
#include "id_range_check.h"
#include "myriad/core/error.h"
#include "myriad/data/token_shard.h"

namespace myriad::data {

void write_token_shard(const std::string& path, std::span<const std::int32_t> tokens, std::uint32_t vocab_size,
                       const AtRest& at_rest) {
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

  // The payload's CRC first (the header precedes it), then header and payload in one sequential
  // write, so an encrypted shard is sealed as it streams; u16 ids are narrowed in bounded chunks.
  const std::size_t token_bytes = shard_dtype_size(header.dtype);
  constexpr std::int64_t kChunk = 1 << 20;
  std::vector<std::uint16_t> narrow;
  auto for_each_chunk = [&](auto&& use) {
    for (std::int64_t begin = 0; begin < count; begin += kChunk) {
      const std::int64_t n = std::min(kChunk, count - begin);
      const void* chunk = tokens.data() + begin;
      if (header.dtype == ShardDType::u16) {
        narrow.resize(static_cast<std::size_t>(n));
        for (std::int64_t i = 0; i < n; ++i) narrow[i] = static_cast<std::uint16_t>(tokens[begin + i]);
        chunk = narrow.data();
      }
      use(chunk, static_cast<std::size_t>(n) * token_bytes);
    }
  };
  std::uint32_t crc = 0;
  for_each_chunk([&](const void* chunk, std::size_t bytes) { crc = crc32(chunk, bytes, crc); });
  header.checksum = crc;
  unsigned char header_bytes[kShardHeaderBytes];
  encode_shard_header(header, header_bytes);
  detail::StagedStoredFile file(path, at_rest, kShardChunkBytes);
  file.write(header_bytes, kShardHeaderBytes);
  for_each_chunk([&](const void* chunk, std::size_t bytes) { file.write(chunk, bytes); });
  file.commit();
}

std::string shard_path(const std::string& directory, const std::string& prefix, std::int64_t index) {
  char name[32];
  std::snprintf(name, sizeof(name), "_%06lld.bin", static_cast<long long>(index));
  return (std::filesystem::path(directory) / (prefix + name)).string();
}

ShardSequenceWriter::ShardSequenceWriter(std::string directory, std::string prefix, std::uint32_t vocab_size,
                                         std::int64_t max_tokens, std::optional<ShardCompression> compression,
                                         AtRest at_rest)
    : directory_(std::move(directory)),
      prefix_(std::move(prefix)),
      vocab_size_(vocab_size),
      max_tokens_(max_tokens),
      compression_(compression),
      at_rest_(std::move(at_rest)) {
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
  if (compression_) {
    write_compressed_token_shard(path, buffer_, vocab_size_, *compression_, at_rest_);
  } else {
    write_token_shard(path, buffer_, vocab_size_, at_rest_);
  }
  paths_.push_back(path);
  written_ += static_cast<std::int64_t>(buffer_.size());
  buffer_.clear();
}

}  // namespace myriad::data
