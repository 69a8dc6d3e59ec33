// ShardBytes: a shard file's bytes, mapped in clear or decrypted on demand (see shard_bytes.h).
#include "shard_bytes.h"

#include <sys/mman.h>

#include <utility>

#include "binary_io.h"
#include "myriad/core/error.h"
#include "myriad/data/encrypted_file.h"

namespace myriad::data::detail {

// An encrypted shard is opened anew for each read — no descriptor stays open, so a set of
// thousands of encrypted shards needs no raised file limit, and threads read without a lock —
// and must still be the file that was opened (its id, the header's random nonce).
struct ShardBytes::Stored {
  std::string path;
  AtRest at_rest;
  std::string file_id;
};

ShardBytes ShardBytes::open(const std::string& path, const std::string& where, std::size_t header_bytes,
                            const AtRest& at_rest) {
  ShardBytes bytes;
  if (!is_encrypted_file(path)) {
    const Mapping mapped = map_read_only(path, where, header_bytes);
    bytes.mapping_ = mapped.address;
    bytes.size_ = mapped.bytes;
    return bytes;
  }
  bytes.stored_ = std::make_unique<Stored>(Stored{path, at_rest, ""});
  try {
    const std::unique_ptr<StoredFileReader> reader = at_rest.open(path);
    bytes.size_ = reader->size();
    bytes.stored_->file_id = reader->file_id();
  } catch (const Error& e) {
    MYRIAD_THROW("cannot open " << where << ": " << e.message());
  }
  MYRIAD_CHECK(bytes.size_ >= header_bytes, where << ": short header: the file holds " << bytes.size_
                                                  << " bytes (decrypted), a header needs " << header_bytes);
  return bytes;
}

ShardBytes::ShardBytes(ShardBytes&& other) noexcept
    : mapping_(std::exchange(other.mapping_, nullptr)),
      stored_(std::move(other.stored_)),
      size_(std::exchange(other.size_, 0)) {}

ShardBytes& ShardBytes::operator=(ShardBytes&& other) noexcept {
  if (this != &other) {
    if (mapping_ != nullptr) ::munmap(mapping_, size_);
    mapping_ = std::exchange(other.mapping_, nullptr);
    stored_ = std::move(other.stored_);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

ShardBytes::~ShardBytes() {
  if (mapping_ != nullptr) ::munmap(mapping_, size_);
}

const unsigned char* ShardBytes::at(std::uint64_t offset, std::size_t n, std::vector<unsigned char>& scratch) const {
  if (mapping_ != nullptr) return static_cast<const unsigned char*>(mapping_) + offset;
  scratch.resize(n);
  if (n > 0) {
    const std::unique_ptr<StoredFileReader> reader = stored_->at_rest.open(stored_->path);
    MYRIAD_CHECK(reader->file_id() == stored_->file_id,
                 stored_->path << ": the encrypted shard was replaced by another file since it was opened");
    reader->read_at(offset, scratch.data(), n);
  }
  return scratch.data();
}

std::string shard_magic(const std::string& path, const AtRest& at_rest) {
  try {
    const std::unique_ptr<StoredFileReader> reader = at_rest.open(path);
    if (reader->size() < 8) return "";
    std::string magic(8, '\0');
    reader->read_at(0, magic.data(), magic.size());
    return magic;
  } catch (const Error&) {
    return "";
  }
}

}  // namespace myriad::data::detail
