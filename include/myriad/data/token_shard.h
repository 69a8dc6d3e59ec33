// Token shards: the on-disk format of tokenized corpora, a memory-mapped reader that validates
// everything it maps, and ShardSet, the concatenated token stream of a directory's shards.
//
// File layout (version 1, every field little-endian; the header is exactly 64 bytes):
//
//   offset  size  field
//        0     8  magic "MYRTOK\0\0"
//        8     4  format version (u32) = 1
//       12     4  dtype (u32): 0 = u16 tokens, 1 = i32 tokens (u16 whenever vocab_size <= 65536)
//       16     4  vocab_size (u32, > 0): every token id lies in [0, vocab_size)
//       20     4  CRC-32 (IEEE 802.3, as zlib's crc32) of the payload bytes exactly as stored
//       24     8  token count (u64)
//       32    32  reserved, written as zero, ignored by version-1 readers
//       64     -  payload: token count ids of the given dtype, nothing after them
//
// TokenShard::open maps the file read-only and checks, each failure a myriad::Error naming the
// file and the problem: the file exists and holds a full header, the magic, a version this
// reader knows (newer versions are refused, not guessed at), a known dtype, a vocab_size > 0 that
// fits the dtype, a payload of exactly count * dtype bytes, the CRC-32 of the payload, and that
// every id is < vocab_size (for a bad id the message gives its position and value).
//
// Cost of opening with verification: one sequential pass over the payload for the CRC (slice-by-8,
// an 8 KiB table; measured 0.9 GB/s on one core of the loaded 2-core build machine) plus one
// vectorised pass for the id range (memory bound): 0.16 s for a 50M-token u16 shard (100 MB),
// so about 0.3 s per 100M u16 tokens, paid by every process that opens the shard; the pages
// read stay in the page cache for training.
// Passing verify = false skips both passes (header and size checks still run) for callers that
// re-open shards they verified before.
//
// The reader assumes a little-endian host (checked at compile time), so tokens are used in place.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <memory>
#include <vector>

#include "myriad/data/at_rest.h"
#include "myriad/data/token_reader.h"

namespace myriad::data {

namespace detail {
class ShardBytes;
}

inline constexpr char kShardMagic[8] = {'M', 'Y', 'R', 'T', 'O', 'K', '\0', '\0'};
inline constexpr std::uint32_t kShardFormatVersion = 1;
inline constexpr std::size_t kShardHeaderBytes = 64;

enum class ShardDType : std::uint32_t { u16 = 0, i32 = 1 };

// Bytes per token of a shard dtype.
std::size_t shard_dtype_size(ShardDType dtype);
// The dtype a writer uses for a vocabulary: u16 when every id fits in 16 bits, else i32.
ShardDType shard_dtype_for_vocab(std::uint32_t vocab_size);

struct ShardHeader {
  std::uint32_t version = kShardFormatVersion;
  ShardDType dtype = ShardDType::u16;
  std::uint32_t vocab_size = 0;
  std::uint32_t checksum = 0;  // CRC-32 of the payload bytes
  std::uint64_t token_count = 0;
};

// The 64 header bytes for `header` (little-endian, reserved bytes zero).
void encode_shard_header(const ShardHeader& header, unsigned char (&bytes)[kShardHeaderBytes]);

// CRC-32 (reflected polynomial 0xEDB88320, initial value and final xor 0xFFFFFFFF), chainable:
// crc32(b, nb, crc32(a, na)) == crc32(a ++ b). crc32("123456789") == 0xCBF43926.
std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t crc = 0);

// A read-only memory map of one shard. Move-only; the mapping lives as long as the object.
class TokenShard final : public TokenReader {
 public:
  // An encrypted shard file (data/at_rest.h) is read through `at_rest`'s keys, chunk by chunk.
  static TokenShard open(const std::string& path, bool verify = true, const AtRest& at_rest = {});
  // The shard in `bytes` (already opened; open_token_reader).
  static TokenShard from_bytes(const std::string& path, detail::ShardBytes bytes, bool verify);

  TokenShard(TokenShard&& other) noexcept;
  TokenShard& operator=(TokenShard&& other) noexcept;
  TokenShard(const TokenShard&) = delete;
  TokenShard& operator=(const TokenShard&) = delete;
  ~TokenShard() override;

  const std::string& path() const override { return path_; }
  const ShardHeader& header() const { return header_; }
  std::int64_t size() const override { return static_cast<std::int64_t>(header_.token_count); }
  std::uint32_t vocab_size() const override { return header_.vocab_size; }
  ShardDType dtype() const { return header_.dtype; }

  std::int32_t token(std::int64_t index) const;  // bounds-checked
  // Copies tokens [begin, begin + count) into out as int32 (bounds-checked).
  void read(std::int64_t begin, std::int64_t count, std::int32_t* out) const override;
  std::string format() const override { return header_.dtype == ShardDType::u16 ? "u16" : "i32"; }
  std::int64_t file_bytes() const override;
  bool encrypted() const override;

 private:
  TokenShard() = default;

  std::string path_;
  ShardHeader header_;
  std::unique_ptr<detail::ShardBytes> bytes_;  // the whole file: mapped, or decrypted on demand
};

// The shards of one split, opened in a fixed order and presented as one token stream. Each
// shard may be plain or block-compressed (open_token_reader decides by its magic), so a loader
// reads both alike. All shards must share vocab_size. Move-only (it owns the readers).
class ShardSet {
 public:
  // `directory`/<split>_*.bin sorted by file name (writers zero-pad the index, so this is the
  // order they were written in). No matching file is an error naming the directory and pattern.
  static ShardSet open_split(const std::string& directory, const std::string& split, bool verify = true,
                             const AtRest& at_rest = {});
  // The paths open_split opens, in its order (throws the same error when there are none).
  static std::vector<std::string> split_paths(const std::string& directory, const std::string& split);
  // The given shards in the given order (at least one).
  explicit ShardSet(const std::vector<std::string>& paths, bool verify = true, const AtRest& at_rest = {});

  std::int64_t size() const { return total_; }  // tokens in the concatenated stream
  std::uint32_t vocab_size() const;
  std::size_t shard_count() const { return shards_.size(); }
  const TokenReader& shard(std::size_t index) const { return *shards_.at(index); }

  // Copies stream tokens [begin, begin + count) into out, across shard boundaries (bounds-checked).
  void read(std::int64_t begin, std::int64_t count, std::int32_t* out) const;

  // "2 shards, 1234 tokens: dir/train_000000.bin (1000 tokens), dir/train_000001.bin (234 tokens)"
  std::string describe() const;

 private:
  std::vector<std::unique_ptr<TokenReader>> shards_;  // plain or block-compressed (open_token_reader)
  std::vector<std::int64_t> starts_;                  // starts_[i] = stream offset of shard i's first token
  std::int64_t total_ = 0;
};

}  // namespace myriad::data
