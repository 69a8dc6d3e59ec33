// Block-compressed token shards: the writer (blocks compressed in parallel, written atomically)
// and the reader (memory-mapped index, blocks decompressed on demand into an LRU cache); see
// compressed_shard.h for the format.
#include "myriad/data/compressed_shard.h"

#include <zstd.h>

#include <cerrno>
#include <cstring>
#include <limits>
#include <memory>
#include <sstream>

#include "binary_io.h"
#include "id_range_check.h"
#include "shard_bytes.h"
#include "myriad/core/error.h"
#include "zstd_handles.h"

namespace myriad::data {

namespace {

using detail::load_u32;
using detail::load_u64;
using detail::store_u32;
using detail::store_u64;

constexpr std::size_t kIndexEntryBytes = 16;

struct CctxFreer {
  void operator()(ZSTD_CCtx* context) const { ZSTD_freeCCtx(context); }
};
// The block's ids in the shard's dtype bytes.
std::vector<unsigned char> block_bytes(std::span<const std::int32_t> ids, ShardDType dtype) {
  std::vector<unsigned char> bytes(ids.size() * shard_dtype_size(dtype));
  if (dtype == ShardDType::u16) {
    auto* out = reinterpret_cast<std::uint16_t*>(bytes.data());
    for (std::size_t i = 0; i < ids.size(); ++i) out[i] = static_cast<std::uint16_t>(ids[i]);
  } else {
    std::memcpy(bytes.data(), ids.data(), bytes.size());
  }
  return bytes;
}

}  // namespace

void write_compressed_token_shard(const std::string& path, std::span<const std::int32_t> tokens,
                                  std::uint32_t vocab_size, const ShardCompression& compression,
                                  const AtRest& at_rest) {
  const std::string where = "compressed token shard '" + path + "'";
  MYRIAD_CHECK(vocab_size > 0 && vocab_size <= 0x7FFFFFFFu,
               where << ": vocab_size " << vocab_size << " must lie in [1, 2^31)");
  MYRIAD_CHECK(compression.block_tokens > 0 && compression.block_tokens <= kMaxBlockTokens,
               where << ": block_tokens " << compression.block_tokens << " must lie in [1, " << kMaxBlockTokens << "]");
  MYRIAD_CHECK(compression.level >= 1 && compression.level <= ZSTD_maxCLevel(),
               where << ": zstd level " << compression.level << " must lie in [1, " << ZSTD_maxCLevel() << "]");
  const auto count = static_cast<std::int64_t>(tokens.size());
  const std::int64_t bad = detail::first_id_out_of_range(tokens.data(), count, vocab_size);
  MYRIAD_CHECK(bad < 0, where << ": token id " << tokens[static_cast<std::size_t>(bad)] << " at position " << bad
                              << " is out of range for vocab_size " << vocab_size);

  const ShardDType dtype = shard_dtype_for_vocab(vocab_size);
  const std::int64_t block_tokens = compression.block_tokens;
  const std::int64_t blocks = (count + block_tokens - 1) / block_tokens;
  std::vector<std::vector<unsigned char>> frames(static_cast<std::size_t>(blocks));
  std::vector<std::uint32_t> crcs(static_cast<std::size_t>(blocks));
  std::string failure;
#pragma omp parallel
  {
    std::unique_ptr<ZSTD_CCtx, CctxFreer> context(ZSTD_createCCtx());
#pragma omp for schedule(dynamic)
    for (std::int64_t b = 0; b < blocks; ++b) {
      const std::int64_t first = b * block_tokens, n = std::min(block_tokens, count - first);
      const std::vector<unsigned char> raw =
          block_bytes(tokens.subspan(static_cast<std::size_t>(first), static_cast<std::size_t>(n)), dtype);
      std::vector<unsigned char>& frame = frames[static_cast<std::size_t>(b)];
      frame.resize(ZSTD_compressBound(raw.size()));
      const std::size_t size =
          ZSTD_compressCCtx(context.get(), frame.data(), frame.size(), raw.data(), raw.size(), compression.level);
      if (ZSTD_isError(size)) {
#pragma omp critical(compressed_shard_failure)
        failure = ZSTD_getErrorName(size);
        continue;
      }
      frame.resize(size);
      crcs[static_cast<std::size_t>(b)] = crc32(raw.data(), raw.size());
    }
  }
  MYRIAD_CHECK(failure.empty(), where << ": zstd compression failed: " << failure);

  // Index and header first (every frame's size is known), then one sequential write: header,
  // blocks, index — so an encrypted shard is sealed as it streams.
  std::vector<unsigned char> index(static_cast<std::size_t>(blocks) * kIndexEntryBytes);
  std::uint64_t offset = kShardHeaderBytes;
  for (std::int64_t b = 0; b < blocks; ++b) {
    const std::vector<unsigned char>& frame = frames[static_cast<std::size_t>(b)];
    unsigned char* entry = index.data() + static_cast<std::size_t>(b) * kIndexEntryBytes;
    store_u64(entry, offset);
    store_u32(entry + 8, static_cast<std::uint32_t>(frame.size()));
    store_u32(entry + 12, crcs[static_cast<std::size_t>(b)]);
    offset += frame.size();
  }
  unsigned char header[kShardHeaderBytes] = {};
  std::memcpy(header, kCompressedShardMagic, sizeof(kCompressedShardMagic));
  store_u32(header + 8, kCompressedShardVersion);
  store_u32(header + 12, static_cast<std::uint32_t>(dtype));
  store_u32(header + 16, vocab_size);
  store_u32(header + 20, static_cast<std::uint32_t>(block_tokens));
  store_u64(header + 24, static_cast<std::uint64_t>(count));
  store_u64(header + 32, static_cast<std::uint64_t>(blocks));
  store_u64(header + 40, offset);
  store_u32(header + 48, crc32(index.data(), index.size()));
  store_u32(header + 52, static_cast<std::uint32_t>(compression.level));
  detail::StagedStoredFile file(path, at_rest, kShardChunkBytes);
  file.write(header, sizeof(header));
  for (const std::vector<unsigned char>& frame : frames) file.write(frame.data(), frame.size());
  file.write(index.data(), index.size());
  file.commit();
}

bool is_compressed_token_shard(const std::string& path, const AtRest& at_rest) {
  return detail::shard_magic(path, at_rest) == std::string(kCompressedShardMagic, sizeof(kCompressedShardMagic));
}

std::unique_ptr<CompressedTokenShard> CompressedTokenShard::open(const std::string& path, bool verify,
                                                                 const AtRest& at_rest) {
  const std::string where = "compressed token shard '" + path + "'";
  return from_bytes(path, detail::ShardBytes::open(path, where, kShardHeaderBytes, at_rest), verify);
}

std::unique_ptr<CompressedTokenShard> CompressedTokenShard::from_bytes(const std::string& path,
                                                                       detail::ShardBytes stored, bool verify) {
  std::unique_ptr<CompressedTokenShard> shard(new CompressedTokenShard());
  shard->path_ = path;
  const std::string where = "compressed token shard '" + path + "'";
  shard->bytes_ = std::make_unique<detail::ShardBytes>(std::move(stored));
  const std::uint64_t file_bytes = shard->bytes_->size();
  std::vector<unsigned char> header_scratch, index_scratch;
  const unsigned char* bytes = shard->bytes_->at(0, kShardHeaderBytes, header_scratch);
  MYRIAD_CHECK(std::memcmp(bytes, kCompressedShardMagic, sizeof(kCompressedShardMagic)) == 0,
               where << ": wrong magic (not a block-compressed myriad token shard): expected \"MYRTOKZ\\0\"");
  const std::uint32_t version = load_u32(bytes + 8);
  MYRIAD_CHECK(version <= kCompressedShardVersion, where << ": format version " << version
                                                         << " is newer than this reader supports (version "
                                                         << kCompressedShardVersion << "); upgrade myriad");
  MYRIAD_CHECK(version >= 1, where << ": invalid format version " << version);
  const std::uint32_t dtype = load_u32(bytes + 12);
  MYRIAD_CHECK(dtype <= 1, where << ": unknown dtype code " << dtype << " (0 = u16, 1 = i32)");
  shard->dtype_ = static_cast<ShardDType>(dtype);
  shard->vocab_size_ = load_u32(bytes + 16);
  MYRIAD_CHECK(shard->vocab_size_ > 0 && shard->vocab_size_ <= 0x7FFFFFFFu,
               where << ": vocab_size " << shard->vocab_size_ << " must lie in [1, 2^31)");
  shard->block_tokens_ = load_u32(bytes + 20);
  MYRIAD_CHECK(shard->block_tokens_ > 0 && shard->block_tokens_ <= kMaxBlockTokens,
               where << ": block_tokens " << shard->block_tokens_ << " must lie in [1, " << kMaxBlockTokens << "]");
  const std::uint64_t tokens = load_u64(bytes + 24), blocks = load_u64(bytes + 32), index_offset = load_u64(bytes + 40);
  MYRIAD_CHECK(tokens <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max() / 2),
               where << ": token count " << tokens << " is implausible");
  shard->token_count_ = static_cast<std::int64_t>(tokens);
  const auto expected_blocks =
      static_cast<std::uint64_t>((shard->token_count_ + shard->block_tokens_ - 1) / shard->block_tokens_);
  MYRIAD_CHECK(blocks == expected_blocks, where << ": " << blocks << " blocks for " << tokens << " tokens of "
                                                << shard->block_tokens_ << " per block (expected " << expected_blocks
                                                << ")");
  MYRIAD_CHECK(index_offset >= kShardHeaderBytes && index_offset <= file_bytes &&
                   (file_bytes - index_offset) == blocks * kIndexEntryBytes,
               where << ": the block index (" << blocks << " entries at byte " << index_offset << ") does not end the "
                     << file_bytes << "-byte file (truncated or trailing bytes)");
  const unsigned char* index =
      shard->bytes_->at(index_offset, static_cast<std::size_t>(blocks * kIndexEntryBytes), index_scratch);
  const std::uint32_t index_crc = crc32(index, blocks * kIndexEntryBytes);
  MYRIAD_CHECK(index_crc == load_u32(bytes + 48), where << ": block index checksum mismatch (corrupted index)");
  shard->level_ = static_cast<int>(load_u32(bytes + 52));
  shard->blocks_.resize(blocks);
  std::uint64_t next = kShardHeaderBytes;
  for (std::uint64_t b = 0; b < blocks; ++b) {
    Block& block = shard->blocks_[b];
    block.offset = load_u64(index + b * kIndexEntryBytes);
    block.bytes = load_u32(index + b * kIndexEntryBytes + 8);
    block.crc = load_u32(index + b * kIndexEntryBytes + 12);
    MYRIAD_CHECK(block.offset == next && block.bytes > 0 && block.offset + block.bytes <= index_offset,
                 where << ": block " << b << " at byte " << block.offset << " (" << block.bytes
                       << " bytes) is not where the previous block ends (" << next << ")");
    next = block.offset + block.bytes;
  }
  MYRIAD_CHECK(next == index_offset,
               where << ": " << (index_offset - next) << " bytes between the last block and the index");
  if (verify) {
    std::vector<std::int32_t> ids;
    for (std::int64_t b = 0; b < shard->block_count(); ++b) shard->decompress(b, ids);
  }
  return shard;
}

CompressedTokenShard::~CompressedTokenShard() = default;

std::int64_t CompressedTokenShard::file_bytes() const { return static_cast<std::int64_t>(bytes_->size()); }
bool CompressedTokenShard::encrypted() const { return bytes_->encrypted(); }

std::string CompressedTokenShard::format() const {
  std::ostringstream text;
  text << "zstd blocks of " << block_tokens_ << " " << (dtype_ == ShardDType::u16 ? "u16" : "i32") << " (level "
       << level_ << ")";
  return text.str();
}

std::int64_t CompressedTokenShard::tokens_in(std::int64_t block) const {
  return std::min(block_tokens_, token_count_ - block * block_tokens_);
}

void CompressedTokenShard::decompress(std::int64_t index, std::vector<std::int32_t>& ids) const {
  const Block& block = blocks_[static_cast<std::size_t>(index)];
  const std::int64_t n = tokens_in(index);
  const std::size_t raw_bytes = static_cast<std::size_t>(n) * shard_dtype_size(dtype_);
  std::vector<unsigned char> sealed;
  const unsigned char* frame = bytes_->at(block.offset, block.bytes, sealed);
  const std::string where = "compressed token shard '" + path_ + "', block " + std::to_string(index);
  // The frame header declares its decompressed size: a mismatch is found before allocating.
  const unsigned long long declared = ZSTD_getFrameContentSize(frame, block.bytes);
  MYRIAD_CHECK(declared == raw_bytes,
               where << " (byte " << block.offset << "): the zstd frame declares "
                     << (declared >= ZSTD_CONTENTSIZE_ERROR ? std::string("no valid size") : std::to_string(declared))
                     << ", expected " << raw_bytes << " bytes");
  std::vector<unsigned char> raw(raw_bytes);
  const std::size_t got = ZSTD_decompress(raw.data(), raw.size(), frame, block.bytes);
  MYRIAD_CHECK(!ZSTD_isError(got),
               where << " (byte " << block.offset << "): corrupt zstd frame: " << ZSTD_getErrorName(got));
  MYRIAD_CHECK(got == raw_bytes, where << ": decompresses to " << got << " bytes, expected " << raw_bytes);
  MYRIAD_CHECK(crc32(raw.data(), raw.size()) == block.crc, where << ": checksum mismatch (corrupted block)");
  ids.resize(static_cast<std::size_t>(n));
  if (dtype_ == ShardDType::u16) {
    const auto* narrow = reinterpret_cast<const std::uint16_t*>(raw.data());
    for (std::int64_t i = 0; i < n; ++i) ids[static_cast<std::size_t>(i)] = narrow[i];
  } else {
    std::memcpy(ids.data(), raw.data(), raw_bytes);
  }
  const std::int64_t bad = detail::first_id_out_of_range(ids.data(), n, vocab_size_);
  MYRIAD_CHECK(bad < 0, where << ": token id " << ids[static_cast<std::size_t>(bad)] << " at position "
                              << index * block_tokens_ + bad << " is out of range for vocab_size " << vocab_size_);
}

const std::vector<std::int32_t>& CompressedTokenShard::cached(std::int64_t index) const {
  for (auto it = cache_.begin(); it != cache_.end(); ++it) {
    if (it->index == index) {
      cache_.splice(cache_.begin(), cache_, it);
      return cache_.front().ids;
    }
  }
  if (cache_.size() >= kCachedBlocks) {
    cache_.splice(cache_.begin(), cache_, std::prev(cache_.end()));  // reuse the oldest entry's buffer
  } else {
    cache_.emplace_front();
  }
  CachedBlock& entry = cache_.front();
  entry.index = -1;
  decompress(index, entry.ids);
  entry.index = index;
  ++decompressed_;
  return entry.ids;
}

void CompressedTokenShard::read(std::int64_t begin, std::int64_t count, std::int32_t* out) const {
  MYRIAD_CHECK(begin >= 0 && count >= 0 && begin <= token_count_ - count,
               "compressed token shard '" << path_ << "': read of " << count << " tokens at " << begin
                                          << " outside [0, " << token_count_ << ")");
  std::lock_guard<std::mutex> lock(mutex_);
  while (count > 0) {
    const std::int64_t block = begin / block_tokens_, local = begin - block * block_tokens_;
    const std::vector<std::int32_t>& ids = cached(block);
    const std::int64_t take = std::min(count, static_cast<std::int64_t>(ids.size()) - local);
    std::memcpy(out, ids.data() + local, static_cast<std::size_t>(take) * sizeof(std::int32_t));
    out += take;
    begin += take;
    count -= take;
  }
}

std::int64_t CompressedTokenShard::blocks_decompressed() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return decompressed_;
}

std::unique_ptr<TokenReader> open_token_reader(const std::string& path, bool verify, const AtRest& at_rest) {
  detail::ShardBytes bytes = detail::ShardBytes::open(path, "token shard '" + path + "'", kShardHeaderBytes, at_rest);
  std::vector<unsigned char> scratch;
  if (std::memcmp(bytes.at(0, sizeof(kCompressedShardMagic), scratch), kCompressedShardMagic,
                  sizeof(kCompressedShardMagic)) == 0)
    return CompressedTokenShard::from_bytes(path, std::move(bytes), verify);
  return std::make_unique<TokenShard>(TokenShard::from_bytes(path, std::move(bytes), verify));
}

}  // namespace myriad::data
