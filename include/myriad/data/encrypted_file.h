// Encrypted files at rest: AES-256-GCM through OpenSSL 3's EVP interface, envelope encryption,
// streamed in authenticated chunks (docs/security.md, "Encryption at rest").
//
// Every file gets its own random 256-bit data key, stored in the file's header wrapped (AES-256-GCM)
// by a key-encryption key (KEK) named by id; a KeyRing holds the KEKs (the current one wraps new
// files, older ones still unwrap), so rotating the KEK rewraps each file's data key — rewrap()
// rewrites the header and copies the ciphertext as it is, never decrypting the data.
//
// Layout: magic "MYRIADE1" | a fixed 160-byte header — version (4 bytes, little-endian, 1), chunk
//   size C (4 bytes, little-endian), KEK id length (1 byte) and id (64 bytes, zero-padded), the
//   file's nonce (8 random bytes), the wrapped data key (32 bytes), the wrap's IV (12) and tag (16),
//   15 reserved zero bytes | chunks: C bytes of ciphertext and a 16-byte tag each, then the final
//   chunk with fewer than C bytes (possibly none) and its tag.
// Chunk i's IV is the file's 8-byte nonce followed by i (4 bytes, big-endian); its additional
// authenticated data is "myriad-chunk-v1", the nonce, i (8 bytes) and whether it is the last chunk
// (1 byte). So a modified, reordered or swapped chunk fails its tag, a file cut at a chunk
// boundary lacks its final chunk, and a chunk moved from another file fails — each an Error
// naming the file and the byte offset of the chunk. The wrap binds the KEK id ("myriad-wrap-v1" +
// id as AAD): a header edited to name another key fails to unwrap. Memory stays at one chunk.
#pragma once

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

namespace myriad::data {

// The key-encryption keys: a text file of lines "key <id> <64 hex digits>" and one "current <id>"
// ('#' starts a comment; `security.key_file`, or the file named by $MYRIAD_KEY_FILE). Ids are 1-64
// letters, digits, '-', '_' or '.'.
class KeyRing {
 public:
  KeyRing() = default;
  // Throws naming the file and the entry when it is unreadable or malformed.
  static KeyRing load(const std::string& path);
  void add(const std::string& id, const std::string& key_bytes, bool make_current);

  bool empty() const { return keys_.empty(); }
  const std::string& current_id() const { return current_; }
  const std::string& key(const std::string& id) const;  // throws naming the id when absent
  bool has(const std::string& id) const { return keys_.count(id) != 0; }
  const std::string& source() const { return source_; }  // the file it came from ("" when built)

 private:
  std::map<std::string, std::string> keys_;
  std::string current_, source_;
};

// Whether `path` starts with the encrypted-file magic (false for a missing or short file).
bool is_encrypted_file(const std::string& path);
// The id of the key-encryption key an encrypted file's header names (throws when it is not one).
std::string encrypted_file_key_id(const std::string& path);

// Writes `path` encrypted under `keys`' current KEK. write() may be called any number of times;
// finish() writes the final chunk and closes the file (the destructor of an unfinished writer
// closes it without the final chunk: a reader then reports it truncated).
class EncryptedWriter {
 public:
  // sync: finish() fsyncs the file (temporary files skip it).
  EncryptedWriter(const std::string& path, const KeyRing& keys, std::size_t chunk_bytes = 1 << 20, bool sync = true);
  ~EncryptedWriter();
  EncryptedWriter(const EncryptedWriter&) = delete;
  EncryptedWriter& operator=(const EncryptedWriter&) = delete;

  void write(const void* data, std::size_t n);
  void finish();
  // The file's random nonce in hex: names this encryption of it (a manifest that records it
  // binds the file, so that another file encrypted under the same key cannot stand in for it).
  std::string file_id() const;

 private:
  void seal(const unsigned char* data, std::size_t n, bool last);
  void seal_batch(const unsigned char* data, std::size_t k);  // k whole chunks, in parallel
  void flush_batch();                                         // writes the sealed batch not yet written

  std::string path_, data_key_, nonce_;
  std::size_t chunk_bytes_;
  std::vector<unsigned char> pending_, sealed_;  // sealed_: the chunk's ciphertext + tag, reused
  std::vector<unsigned char> batches_[2];        // sealed batches: one written while the other fills
  int ready_ = 0;                                // batches_[ready_] holds the batch not yet written ...
  bool unwritten_ = false;                       // ... when this is set
  std::size_t batch_bytes_ = 0;
  std::uint32_t index_ = 0;
  std::FILE* file_ = nullptr;
  bool sync_ = true;
  std::uint64_t written_ = 0, writeback_from_ = 0;  // write-back started as the file grows
};

// Reads an encrypted file sequentially, authenticating each chunk before handing out its bytes.
class EncryptedReader {
 public:
  EncryptedReader(const std::string& path, const KeyRing& keys);
  ~EncryptedReader();
  EncryptedReader(const EncryptedReader&) = delete;
  EncryptedReader& operator=(const EncryptedReader&) = delete;

  // Up to n bytes (fewer only at the end); 0 at the end of the file.
  std::size_t read(void* out, std::size_t n);
  // The plaintext's size, from the file's size (throws naming the file when no chunk layout gives
  // it: a file cut at a chunk boundary or inside a tag).
  std::uint64_t plain_size() const;
  // The next read() starts at plaintext byte `offset` (<= plain_size()): random access by chunk,
  // each chunk still authenticated (with its index and whether it is the last) before use.
  void seek(std::uint64_t offset);
  const std::string& kek_id() const { return kek_id_; }
  std::string file_id() const;  // as EncryptedWriter::file_id

 private:
  // Decrypts the next chunk into plain_, or straight into `into` (room for a whole chunk; then
  // plain_ is left empty); returns its size, or -1 past the final chunk.
  std::int64_t open_chunk(unsigned char* into = nullptr);
  void open_batch(unsigned char* into, std::size_t k);  // k whole non-final chunks into `into`, in parallel

  std::string path_, data_key_, nonce_, kek_id_;
  std::size_t chunk_bytes_ = 0;
  std::vector<unsigned char> plain_, sealed_;  // sealed_: the chunk read, reused
  std::size_t at_ = 0;
  std::uint32_t index_ = 0;
  std::uint64_t offset_ = 0;  // of the next chunk in the file
  std::uint64_t file_size_ = 0;
  bool done_ = false;
  std::FILE* file_ = nullptr;
};

// The whole plaintext of an encrypted file.
std::string read_encrypted_file(const std::string& path, const KeyRing& keys);
// Writes `data` encrypted (to a temporary name, then renamed: the file appears complete or not at all).
void write_encrypted_file(const std::string& path, const std::string& data, const KeyRing& keys);
// Rewraps the file's data key under `keys`' current KEK (unwrapping it with the KEK its header
// names, which `keys` must hold); the ciphertext is copied unchanged. Atomic (temporary + rename).
// Returns the KEK id it was wrapped under before.
std::string rewrap(const std::string& path, const KeyRing& keys);
// Writes the plaintext of the encrypted file `path` to `out` (a temporary name, then renamed; the
// process umask decides its mode), streamed in blocks: an explicit release in clear (an HF folder
// for another system). Every chunk is authenticated first; returns the plaintext's size.
std::uint64_t decrypt_file(const std::string& path, const std::string& out, const KeyRing& keys);

}  // namespace myriad::data
