// AtRest — how a job's artefacts (checkpoints, exported weights) are stored: in clear, or
// encrypted (data/encrypted_file.h) under a key ring (docs/security.md, "Encryption at rest").
//
// Invariants: with a key ring every file created through create()/write_all() is encrypted under
// its current key (mode 0600); without one, files are written in clear. Readers take either kind
// transparently by the file's magic: an encrypted file needs the key its header names, else an
// Error naming the file, the key id and how to give the key (security.key_file or
// $MYRIAD_KEY_FILE). Reads are random access; an encrypted file is authenticated chunk by chunk.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "myriad/data/encrypted_file.h"

namespace myriad::data {

// The environment variable naming the key file when no security.key_file is configured.
inline constexpr const char* kKeyFileVariable = "MYRIAD_KEY_FILE";

// Random access to a stored file's plaintext.
class StoredFileReader {
 public:
  virtual ~StoredFileReader() = default;
  virtual std::uint64_t size() = 0;
  // Exactly n bytes from `offset`; throws naming the file when they are not there.
  virtual void read_at(std::uint64_t offset, void* out, std::size_t n) = 0;
  virtual bool encrypted() const = 0;
  // An encrypted file's identity (EncryptedReader::file_id); "" in clear.
  virtual std::string file_id() const = 0;
};

// Sequential writing of a stored file; finish() flushes, fsyncs and closes it (a file never
// finished is incomplete: encrypted, a reader reports it truncated).
class StoredFileWriter {
 public:
  virtual ~StoredFileWriter() = default;
  virtual void write(const void* data, std::size_t n) = 0;
  virtual void finish() = 0;
  virtual std::string file_id() const = 0;  // as StoredFileReader::file_id
};

class AtRest {
 public:
  static constexpr std::size_t kChunkBytes = std::size_t{1} << 20;  // the default encrypted chunk

  AtRest() = default;  // clear
  explicit AtRest(KeyRing keys) : keys_(std::move(keys)) {}
  // The key file `configured` (the security.key_file setting) when not empty, else the one
  // $MYRIAD_KEY_FILE names, else clear. Throws naming the file and the setting when it is
  // unreadable or malformed. `setting` names where `configured` came from in errors.
  static AtRest from_key_file(const std::string& configured, const std::string& setting = "security.key_file");

  bool encrypts() const { return !keys_.empty(); }
  // "clear" or "AES-256-GCM under key '<id>' of <file>".
  std::string describe() const;

  // Encrypted files are sealed in chunks of `chunk_bytes` (smaller chunks make random reads cheaper).
  // sync: finish() fsyncs the file (false for temporary files, which need no durability).
  std::unique_ptr<StoredFileWriter> create(const std::string& path, std::size_t chunk_bytes = kChunkBytes,
                                           bool sync = true) const;
  std::unique_ptr<StoredFileReader> open(const std::string& path) const;
  std::string read_all(const std::string& path) const;
  // Creates `path` holding `bytes`, fsync'ed (not atomic: callers write into temporary folders
  // or names and rename).
  void write_all(const std::string& path, const std::string& bytes) const;
  // Throws when `path` is encrypted and its data key does not unwrap with these keys (no key
  // file, a key id the ring lacks, a wrong key under that id); a clear or missing file passes.
  void check_key(const std::string& path) const;

 private:
  KeyRing keys_;
};

}  // namespace myriad::data
