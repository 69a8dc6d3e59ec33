// Token shard reader: header encoding, CRC-32, the validating memory-mapped TokenShard and the
// concatenated ShardSet. Every failure names the file and what is wrong.
#include "myriad/data/token_shard.h"

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <limits>
#include <sstream>
#include <utility>

#include "binary_io.h"
#include "id_range_check.h"
#include "shard_bytes.h"
#include "myriad/core/error.h"

static_assert(std::endian::native == std::endian::little,
              "token shards are little-endian and mapped in place; big-endian hosts are not supported");

namespace myriad::data {

namespace {

// Slice-by-8 tables: kCrcTables[0] is the classic byte table, kCrcTables[k][b] advances the
// CRC of byte b followed by k zero bytes.
constexpr std::array<std::array<std::uint32_t, 256>, 8> make_crc_tables() {
  std::array<std::array<std::uint32_t, 256>, 8> tables{};
  for (std::uint32_t b = 0; b < 256; ++b) {
    std::uint32_t c = b;
    for (int bit = 0; bit < 8; ++bit) c = (c & 1u) ? (c >> 1) ^ 0xEDB88320u : c >> 1;
    tables[0][b] = c;
  }
  for (int k = 1; k < 8; ++k)
    for (std::uint32_t b = 0; b < 256; ++b)
      tables[k][b] = (tables[k - 1][b] >> 8) ^ tables[0][tables[k - 1][b] & 0xFFu];
  return tables;
}

constexpr auto kCrcTables = make_crc_tables();

using detail::load_u32;
using detail::load_u64;
using detail::store_u32;
using detail::store_u64;

}  // namespace

std::size_t shard_dtype_size(ShardDType dtype) { return dtype == ShardDType::u16 ? 2 : 4; }

ShardDType shard_dtype_for_vocab(std::uint32_t vocab_size) {
  return vocab_size <= 65536u ? ShardDType::u16 : ShardDType::i32;
}

void encode_shard_header(const ShardHeader& header, unsigned char (&bytes)[kShardHeaderBytes]) {
  std::memset(bytes, 0, kShardHeaderBytes);
  std::memcpy(bytes, kShardMagic, sizeof(kShardMagic));
  store_u32(bytes + 8, header.version);
  store_u32(bytes + 12, static_cast<std::uint32_t>(header.dtype));
  store_u32(bytes + 16, header.vocab_size);
  store_u32(bytes + 20, header.checksum);
  store_u64(bytes + 24, header.token_count);
}

std::uint32_t crc32(const void* data, std::size_t size, std::uint32_t crc) {
  const auto& t = kCrcTables;
  const auto* p = static_cast<const unsigned char*>(data);
  std::uint32_t c = ~crc;
  for (; size >= 8; size -= 8, p += 8) {
    std::uint32_t lo = c ^ load_u32(p), hi = load_u32(p + 4);
    c = t[7][lo & 0xFF] ^ t[6][(lo >> 8) & 0xFF] ^ t[5][(lo >> 16) & 0xFF] ^ t[4][lo >> 24] ^ t[3][hi & 0xFF] ^
        t[2][(hi >> 8) & 0xFF] ^ t[1][(hi >> 16) & 0xFF] ^ t[0][hi >> 24];
  }
  for (; size > 0; --size, ++p) c = (c >> 8) ^ t[0][(c ^ *p) & 0xFF];
  return ~c;
}

// ---- TokenShard ----

TokenShard TokenShard::open(const std::string& path, bool verify, const AtRest& at_rest) {
  const std::string where = "token shard '" + path + "'";
  return from_bytes(path, detail::ShardBytes::open(path, where, kShardHeaderBytes, at_rest), verify);
}

TokenShard TokenShard::from_bytes(const std::string& path, detail::ShardBytes bytes, bool verify) {
  TokenShard shard;
  shard.path_ = path;
  shard.bytes_ = std::make_unique<detail::ShardBytes>(std::move(bytes));
  const std::string where = "token shard '" + path + "'";
  const std::uint64_t file_bytes = shard.bytes_->size();
  std::vector<unsigned char> scratch;
  const unsigned char* header_bytes = shard.bytes_->at(0, kShardHeaderBytes, scratch);
  MYRIAD_CHECK(std::memcmp(header_bytes, kShardMagic, sizeof(kShardMagic)) == 0,
               where << ": wrong magic (not a myriad token shard): expected \"MYRTOK\\0\\0\"");
  ShardHeader& header = shard.header_;
  header.version = load_u32(header_bytes + 8);
  MYRIAD_CHECK(header.version <= kShardFormatVersion, where << ": format version " << header.version
                                                            << " is newer than this reader supports (version "
                                                            << kShardFormatVersion << "); upgrade myriad");
  MYRIAD_CHECK(header.version >= 1, where << ": invalid format version " << header.version);
  std::uint32_t dtype = load_u32(header_bytes + 12);
  MYRIAD_CHECK(dtype <= 1, where << ": unknown dtype code " << dtype << " (0 = u16, 1 = i32)");
  header.dtype = static_cast<ShardDType>(dtype);
  header.vocab_size = load_u32(header_bytes + 16);
  MYRIAD_CHECK(header.vocab_size > 0, where << ": vocab_size is 0");
  MYRIAD_CHECK(header.vocab_size <= static_cast<std::uint32_t>(std::numeric_limits<std::int32_t>::max()),
               where << ": vocab_size " << header.vocab_size << " does not fit int32 ids");
  header.checksum = load_u32(header_bytes + 20);
  header.token_count = load_u64(header_bytes + 24);

  const std::uint64_t payload_bytes = file_bytes - kShardHeaderBytes;
  const std::uint64_t token_bytes = shard_dtype_size(header.dtype);
  MYRIAD_CHECK(header.token_count <= payload_bytes / token_bytes && header.token_count * token_bytes == payload_bytes,
               where << ": payload size mismatch ("
                     << (header.token_count > payload_bytes / token_bytes ? "truncated" : "trailing bytes")
                     << "): the header says " << header.token_count << " tokens of " << token_bytes
                     << " bytes, but the file holds " << payload_bytes << " payload bytes");

  if (verify) {
    // Piece by piece, so an encrypted shard is checked in bounded memory.
    constexpr std::uint64_t kPieceTokens = 1 << 21;
    std::uint32_t actual = 0;
    std::int64_t bad = -1;
    for (std::uint64_t first = 0; first < header.token_count; first += kPieceTokens) {
      const std::uint64_t n = std::min(kPieceTokens, header.token_count - first);
      const unsigned char* piece =
          shard.bytes_->at(kShardHeaderBytes + first * token_bytes, static_cast<std::size_t>(n * token_bytes), scratch);
      actual = crc32(piece, static_cast<std::size_t>(n * token_bytes), actual);
      const std::int64_t local = header.dtype == ShardDType::u16
                                     ? detail::first_id_out_of_range(reinterpret_cast<const std::uint16_t*>(piece),
                                                                     static_cast<std::int64_t>(n), header.vocab_size)
                                     : detail::first_id_out_of_range(reinterpret_cast<const std::int32_t*>(piece),
                                                                     static_cast<std::int64_t>(n), header.vocab_size);
      if (local >= 0 && bad < 0) bad = static_cast<std::int64_t>(first) + local;
    }
    MYRIAD_CHECK(actual == header.checksum, where << ": checksum mismatch (corrupted payload): header CRC-32 0x"
                                                  << std::hex << header.checksum << ", payload CRC-32 0x" << actual);
    MYRIAD_CHECK(bad < 0, where << ": token id " << shard.token(bad) << " at position " << bad
                                << " is out of range for vocab_size " << header.vocab_size);
  }
  return shard;
}

TokenShard::TokenShard(TokenShard&& other) noexcept = default;
TokenShard& TokenShard::operator=(TokenShard&& other) noexcept = default;
TokenShard::~TokenShard() = default;

std::int64_t TokenShard::file_bytes() const { return static_cast<std::int64_t>(bytes_->size()); }
bool TokenShard::encrypted() const { return bytes_->encrypted(); }

std::int32_t TokenShard::token(std::int64_t index) const {
  std::int32_t id = 0;
  MYRIAD_CHECK(index >= 0 && index < size(),
               "token shard '" << path_ << "': index " << index << " out of range [0, " << size() << ")");
  read(index, 1, &id);
  return id;
}

void TokenShard::read(std::int64_t begin, std::int64_t count, std::int32_t* out) const {
  MYRIAD_CHECK(
      begin >= 0 && count >= 0 && begin <= size() - count,
      "token shard '" << path_ << "': read of " << count << " tokens at " << begin << " outside [0, " << size() << ")");
  if (count == 0) return;  // `out` may be null then (an empty vector's data()), and memcpy's pointers must not be
  const std::size_t token_bytes = shard_dtype_size(header_.dtype);
  std::vector<unsigned char> scratch;
  const unsigned char* src = bytes_->at(kShardHeaderBytes + static_cast<std::uint64_t>(begin) * token_bytes,
                                        static_cast<std::size_t>(count) * token_bytes, scratch);
  if (header_.dtype == ShardDType::u16) {
    const auto* narrow = reinterpret_cast<const std::uint16_t*>(src);
    for (std::int64_t i = 0; i < count; ++i) out[i] = narrow[i];
  } else {
    std::memcpy(out, src, static_cast<std::size_t>(count) * sizeof(std::int32_t));
  }
}

// ---- ShardSet ----

ShardSet ShardSet::open_split(const std::string& directory, const std::string& split, bool verify,
                              const AtRest& at_rest) {
  return ShardSet(split_paths(directory, split), verify, at_rest);
}

std::vector<std::string> ShardSet::split_paths(const std::string& directory, const std::string& split) {
  namespace fs = std::filesystem;
  const std::string prefix = split + "_";
  std::error_code error;
  fs::directory_iterator it(directory, error);
  MYRIAD_CHECK(!error, "cannot list token shards in '" << directory << "': " << error.message());
  std::vector<std::string> names;
  for (const fs::directory_entry& entry : it) {
    std::string name = entry.path().filename().string();
    if (name.size() > prefix.size() + 4 && name.starts_with(prefix) && name.ends_with(".bin") &&
        entry.is_regular_file(error))
      names.push_back(name);
  }
  MYRIAD_CHECK(!names.empty(), "no token shards '" << prefix << "*.bin' in '" << directory << "'");
  std::sort(names.begin(), names.end());
  std::vector<std::string> paths;
  paths.reserve(names.size());
  for (const std::string& name : names) paths.push_back((fs::path(directory) / name).string());
  return paths;
}

ShardSet::ShardSet(const std::vector<std::string>& paths, bool verify, const AtRest& at_rest) {
  MYRIAD_CHECK(!paths.empty(), "ShardSet needs at least one shard path");
  for (const std::string& path : paths) {
    std::unique_ptr<TokenReader> shard = open_token_reader(path, verify, at_rest);
    if (!shards_.empty()) {
      MYRIAD_CHECK(shard->vocab_size() == shards_.front()->vocab_size(),
                   "token shards disagree on vocab_size: '" << shards_.front()->path() << "' has "
                                                            << shards_.front()->vocab_size() << ", '" << path
                                                            << "' has " << shard->vocab_size());
    }
    starts_.push_back(total_);
    total_ += shard->size();
    shards_.push_back(std::move(shard));
  }
}

std::uint32_t ShardSet::vocab_size() const { return shards_.front()->vocab_size(); }

void ShardSet::read(std::int64_t begin, std::int64_t count, std::int32_t* out) const {
  MYRIAD_CHECK(
      begin >= 0 && count >= 0 && begin <= total_ - count,
      "token stream read of " << count << " tokens at " << begin << " outside [0, " << total_ << ") of " << describe());
  // Last shard whose start is <= begin (empty shards are skipped by the loop below).
  auto index = static_cast<std::size_t>(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin() - 1);
  while (count > 0) {
    const TokenReader& shard = *shards_[index];
    std::int64_t local = begin - starts_[index];
    std::int64_t take = std::min(count, shard.size() - local);
    if (take > 0) {
      shard.read(local, take, out);
      out += take;
      begin += take;
      count -= take;
    }
    ++index;
  }
}

std::string ShardSet::describe() const {
  std::ostringstream text;
  text << shards_.size() << (shards_.size() == 1 ? " shard, " : " shards, ") << total_ << " tokens: ";
  constexpr std::size_t kListed = 8;
  for (std::size_t i = 0; i < shards_.size() && i < kListed; ++i)
    text << (i ? ", " : "") << shards_[i]->path() << " (" << shards_[i]->size() << " tokens)";
  if (shards_.size() > kListed) text << ", ... " << shards_.size() - kListed << " more";
  return text.str();
}

}  // namespace myriad::data
