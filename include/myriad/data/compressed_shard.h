// Block-compressed token shards — token ids compressed with zstd in independent blocks, with a
// block index for random access; the training loader reads them like plain shards (ShardSet).
//
// File layout (every field little-endian; the header is 64 bytes):
//   offset size field
//        0    8 magic "MYRTOKZ\0"
//        8    4 format version (u32) = 1
//       12    4 dtype of the ids (u32): 0 = u16, 1 = i32 (u16 whenever vocab_size <= 65536)
//       16    4 vocab_size (u32 > 0): every id lies in [0, vocab_size)
//       20    4 block_tokens (u32 in [1, kMaxBlockTokens]): tokens per block, every block but the
//               last full
//       24    8 token count (u64)
//       32    8 block count (u64) = ceil(token count / block_tokens)
//       40    8 index offset (u64): where the block index starts, right after the last block
//       48    4 CRC-32 of the index bytes
//       52    4 zstd level the writer used (i32; informative)
//       56    8 reserved, zero
//       64    - the blocks, back to back: each one zstd frame of its tokens in the dtype's bytes
//   index     - per block: u64 file offset, u32 compressed bytes, u32 CRC-32 of the block's ids
//               (the decompressed bytes); nothing after the index.
//
// Opening checks, each failure a myriad::Error naming the file: the magic, a version this reader
// knows, dtype, vocab_size, block_tokens, the block count against the token count, the index
// inside the file with its CRC, and the blocks back to back from byte 64 up to the index.
// verify = true also decompresses every block. Whatever verify says, a block is checked every
// time it is decompressed (its frame's size, its CRC, ids < vocab_size), so a corrupt block is an
// error naming the file and the block, never wrong tokens.
//
// Reads decompress the blocks they touch into a cache of kCachedBlocks blocks per shard (least
// recently used out), under a mutex: any number of threads may read. A random window of T
// tokens costs one or two block decompressions on a miss; the trainer hides them behind the
// step (Engine's batch prefetch).
#pragma once

#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "myriad/data/at_rest.h"
#include "myriad/data/token_reader.h"
#include "myriad/data/token_shard.h"

namespace myriad::data {

inline constexpr char kCompressedShardMagic[8] = {'M', 'Y', 'R', 'T', 'O', 'K', 'Z', '\0'};
inline constexpr std::uint32_t kCompressedShardVersion = 1;
// The most tokens one block may hold (64 MiB of i32 ids decompressed): a reader allocates one
// block at a time, so a header cannot make it allocate more than this.
inline constexpr std::int64_t kMaxBlockTokens = std::int64_t{1} << 24;

// Defaults: 128 Ki tokens per block at level 19 keep GPT-2 tokens of English text at <= 1/3 of
// the text's bytes (3.03x on tinyshakespeare; one frame over the whole stream reaches 3.15x,
// 64 Ki-token blocks 2.97x) while a random window decompresses at most 256 KiB (bench_data).
struct ShardCompression {
  std::int64_t block_tokens = 131072;  // in [1, kMaxBlockTokens]
  int level = 19;                      // zstd level, 1..22
};

// Encrypted shards are sealed in chunks of this size: a random window of a few thousand tokens
// authenticates and decrypts one or two chunks (the default 1 MiB chunk would cost 16x more).
inline constexpr std::size_t kShardChunkBytes = std::size_t{64} << 10;

// Writes the shard atomically (like write_token_shard), encrypted when `at_rest` encrypts; blocks
// are compressed in parallel. Ids are validated first (each in [0, vocab_size)).
void write_compressed_token_shard(const std::string& path, std::span<const std::int32_t> tokens,
                                  std::uint32_t vocab_size, const ShardCompression& compression,
                                  const AtRest& at_rest = {});

// Whether the file starts with kCompressedShardMagic — inside the encryption, for an encrypted file
// read with `at_rest` (false when it cannot be read).
bool is_compressed_token_shard(const std::string& path, const AtRest& at_rest = {});

class CompressedTokenShard final : public TokenReader {
 public:
  static constexpr std::size_t kCachedBlocks = 8;

  static std::unique_ptr<CompressedTokenShard> open(const std::string& path, bool verify = true,
                                                    const AtRest& at_rest = {});
  static std::unique_ptr<CompressedTokenShard> from_bytes(const std::string& path, detail::ShardBytes bytes,
                                                          bool verify);
  ~CompressedTokenShard() override;
  CompressedTokenShard(const CompressedTokenShard&) = delete;
  CompressedTokenShard& operator=(const CompressedTokenShard&) = delete;

  const std::string& path() const override { return path_; }
  std::int64_t size() const override { return token_count_; }
  std::uint32_t vocab_size() const override { return vocab_size_; }
  void read(std::int64_t begin, std::int64_t count, std::int32_t* out) const override;
  std::string format() const override;
  std::int64_t file_bytes() const override;
  bool encrypted() const override;

  std::int64_t block_tokens() const { return block_tokens_; }
  std::int64_t block_count() const { return static_cast<std::int64_t>(blocks_.size()); }
  std::int64_t blocks_decompressed() const;  // cache misses so far (for benchmarks)

 private:
  struct Block {
    std::uint64_t offset = 0;
    std::uint32_t bytes = 0, crc = 0;
  };
  struct CachedBlock {
    std::int64_t index = -1;
    std::vector<std::int32_t> ids;
  };
  CompressedTokenShard() = default;
  std::int64_t tokens_in(std::int64_t block) const;
  // Decompresses and checks block `index` into ids (throws naming the file and the block).
  void decompress(std::int64_t index, std::vector<std::int32_t>& ids) const;
  const std::vector<std::int32_t>& cached(std::int64_t index) const;  // under mutex_

  std::string path_;
  std::unique_ptr<detail::ShardBytes> bytes_;  // the whole file: mapped, or decrypted on demand
  ShardDType dtype_ = ShardDType::u16;
  std::uint32_t vocab_size_ = 0;
  std::int64_t block_tokens_ = 0, token_count_ = 0;
  int level_ = 0;
  std::vector<Block> blocks_;
  mutable std::mutex mutex_;
  mutable std::list<CachedBlock> cache_;  // most recently used first
  mutable std::int64_t decompressed_ = 0;
};

}  // namespace myriad::data
