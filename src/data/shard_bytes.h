// Internal: the bytes of one token shard file, whatever its storage — memory-mapped when the file
// is in clear, read through the key ring (data/at_rest.h) chunk by chunk when it is encrypted.
// The two shard formats (token_shard.h, compressed_shard.h) parse these bytes, so an encrypted
// shard is an ordinary shard of either format inside an encrypted file.
//
// Invariants: size() is the shard's own byte count (the plaintext's, for an encrypted file); at()
// returns exactly n bytes from offset or throws naming the file; any number of threads may call
// at() at once. An encrypted file is opened for each at() (no descriptor stays open: a set of
// thousands of shards needs no raised file limit) and every chunk read is authenticated.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "myriad/data/at_rest.h"

namespace myriad::data::detail {

class ShardBytes {
 public:
  // Throws naming `where` when the file cannot be opened, or holds fewer than `header_bytes`
  // bytes ("short header"), or is encrypted under a key `at_rest` lacks.
  static ShardBytes open(const std::string& path, const std::string& where, std::size_t header_bytes,
                         const AtRest& at_rest);
  ShardBytes() = default;
  ShardBytes(ShardBytes&&) noexcept;
  ShardBytes& operator=(ShardBytes&&) noexcept;
  ~ShardBytes();

  std::uint64_t size() const { return size_; }
  bool encrypted() const { return stored_ != nullptr; }
  // n bytes from `offset` (offset + n <= size()): a pointer into the mapping, or into `scratch`
  // filled from the encrypted file. Valid until `scratch` changes (or the object goes).
  const unsigned char* at(std::uint64_t offset, std::size_t n, std::vector<unsigned char>& scratch) const;

 private:
  struct Stored;
  void* mapping_ = nullptr;
  std::unique_ptr<Stored> stored_;
  std::uint64_t size_ = 0;
};

// The first 8 bytes of a shard file, read through `at_rest` (so an encrypted shard shows the
// magic of the format inside); empty when the file is shorter or cannot be read.
std::string shard_magic(const std::string& path, const AtRest& at_rest);

}  // namespace myriad::data::detail
