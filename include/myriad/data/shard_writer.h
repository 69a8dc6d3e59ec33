// Writing token shards (format in token_shard.h).
//
// write_token_shard is atomic: it writes "<path>.tmp", fsyncs it, renames it over <path> and
// fsyncs the directory, so <path> is either absent / its previous content or the complete new
// shard, never a partial one. On any failure the .tmp file is removed and a myriad::Error names
// the path and the system error. Ids are validated before anything is written (each must lie in
// [0, vocab_size); a bad one is reported with its position and value).
//
// ShardSequenceWriter cuts a token stream into numbered shards "<dir>/<prefix>_000000.bin", ...
// of at most max_tokens tokens each (every shard but the last is full), plain or, given a
// ShardCompression, block-compressed (compressed_shard.h; same names: readers tell them apart by
// their magic), in clear or encrypted (data/at_rest.h) as the given AtRest says.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "myriad/data/compressed_shard.h"

namespace myriad::data {

// With an encrypting `at_rest`, the shard is written encrypted (chunks of kShardChunkBytes).
void write_token_shard(const std::string& path, std::span<const std::int32_t> tokens, std::uint32_t vocab_size,
                       const AtRest& at_rest = {});

class ShardSequenceWriter {
 public:
  ShardSequenceWriter(std::string directory, std::string prefix, std::uint32_t vocab_size, std::int64_t max_tokens,
                      std::optional<ShardCompression> compression = std::nullopt, AtRest at_rest = {});

  // Buffers tokens, writing every shard that fills up.
  void append(std::span<const std::int32_t> tokens);
  // Writes the partial last shard (if any tokens are buffered). Further appends start a new shard.
  void finish();

  const std::vector<std::string>& paths() const { return paths_; }  // shards written so far
  std::int64_t tokens_written() const { return written_; }

 private:
  void flush();

  std::string directory_;
  std::string prefix_;
  std::uint32_t vocab_size_;
  std::int64_t max_tokens_;
  std::optional<ShardCompression> compression_;
  AtRest at_rest_;  // encrypts the shards when it holds keys
  std::vector<std::int32_t> buffer_;
  std::vector<std::string> paths_;
  std::int64_t written_ = 0;
};

// "<directory>/<prefix>_<index, 6 digits>.bin"
std::string shard_path(const std::string& directory, const std::string& prefix, std::int64_t index);

}  // namespace myriad::data
