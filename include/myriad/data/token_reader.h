// TokenReader — read access to one file of token ids, whatever its format: a plain token shard
// (token_shard.h: memory-mapped) or a block-compressed one (compressed_shard.h: decompressed
// block by block). ShardSet concatenates readers, so the training loader reads both alike;
// open_token_reader picks the format from the file's magic bytes. Either format may be stored
// encrypted (data/at_rest.h): the reader then decrypts, chunk by chunk, what it reads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "myriad/data/at_rest.h"

namespace myriad::data {

class TokenReader {
 public:
  virtual ~TokenReader() = default;
  virtual const std::string& path() const = 0;
  virtual std::int64_t size() const = 0;  // tokens
  virtual std::uint32_t vocab_size() const = 0;
  // Tokens [begin, begin + count) as int32 (bounds-checked, the message naming the file). Safe to
  // call from several threads at once.
  virtual void read(std::int64_t begin, std::int64_t count, std::int32_t* out) const = 0;
  // "u16" / "i32" for a plain shard, "zstd blocks of 65536 u16" for a compressed one.
  virtual std::string format() const = 0;
  virtual std::int64_t file_bytes() const = 0;  // the shard's bytes (decrypted, when encrypted)
  virtual bool encrypted() const = 0;           // stored encrypted (read through a key ring)
};

// A plain or a block-compressed shard by its magic (the magic inside, for an encrypted file, read
// with `at_rest`'s keys); verify as TokenShard::open / CompressedTokenShard::open. Errors name the
// file (an encrypted one without its key: the key id and how to give it).
std::unique_ptr<TokenReader> open_token_reader(const std::string& path, bool verify = true, const AtRest& at_rest = {});

}  // namespace myriad::data
