// Encrypted files: the header, the chunks' AES-256-GCM, the key ring (data/encrypted_file.h).
#include "myriad/data/encrypted_file.h"

#include <openssl/evp.h>
#include <openssl/rand.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "myriad/core/error.h"
#include "writeback.h"
#include "binary_io.h"
#include "myriad/data/digests.h"

namespace myriad::data {

namespace {

constexpr char kMagic[8] = {'M', 'Y', 'R', 'I', 'A', 'D', 'E', '1'};
constexpr std::size_t kHeaderBytes = 160, kTagBytes = 16, kKeyBytes = 32, kNonceBytes = 8, kIvBytes = 12;
constexpr std::size_t kIdBytes = 64;
// Whole chunks handled together: sealed or opened in parallel (OpenMP), one write or read each.
constexpr std::size_t kBatchChunks = 16;

struct Header {
  std::uint32_t version = 1, chunk = 0;
  std::string kek_id;
  std::array<unsigned char, kNonceBytes> nonce{};
  std::array<unsigned char, kKeyBytes> wrapped{};
  std::array<unsigned char, kIvBytes> wrap_iv{};
  std::array<unsigned char, kTagBytes> wrap_tag{};
};

void put32(unsigned char* at, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) at[i] = static_cast<unsigned char>(v >> (8 * i));
}
std::uint32_t get32(const unsigned char* at) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(at[i]) << (8 * i);
  return v;
}

std::array<unsigned char, kHeaderBytes> encode(const Header& h) {
  std::array<unsigned char, kHeaderBytes> out{};
  unsigned char* p = out.data();
  put32(p, h.version);
  put32(p + 4, h.chunk);
  p[8] = static_cast<unsigned char>(h.kek_id.size());
  std::memcpy(p + 9, h.kek_id.data(), h.kek_id.size());
  p += 9 + kIdBytes;
  p = std::copy(h.nonce.begin(), h.nonce.end(), p);
  p = std::copy(h.wrapped.begin(), h.wrapped.end(), p);
  p = std::copy(h.wrap_iv.begin(), h.wrap_iv.end(), p);
  std::copy(h.wrap_tag.begin(), h.wrap_tag.end(), p);  // the rest stays zero (reserved)
  return out;
}

Header decode(const unsigned char* p, const std::string& path) {
  Header h;
  h.version = get32(p);
  h.chunk = get32(p + 4);
  MYRIAD_CHECK(h.version == 1,
               path << ": encrypted-file version " << h.version << " is not 1 (a newer myriad wrote it)");
  MYRIAD_CHECK(h.chunk >= 16 && h.chunk <= (1u << 30), path << ": a corrupt header (chunk size " << h.chunk << ")");
  const std::size_t id_length = p[8];
  MYRIAD_CHECK(id_length >= 1 && id_length <= kIdBytes, path << ": a corrupt header (key id length)");
  h.kek_id.assign(reinterpret_cast<const char*>(p + 9), id_length);
  const unsigned char* q = p + 9 + kIdBytes;
  std::memcpy(h.nonce.data(), q, kNonceBytes);
  std::memcpy(h.wrapped.data(), q += kNonceBytes, kKeyBytes);
  std::memcpy(h.wrap_iv.data(), q += kKeyBytes, kIvBytes);
  std::memcpy(h.wrap_tag.data(), q += kIvBytes, kTagBytes);
  return h;
}

// AES-256-GCM of n bytes: encrypt (tag written) or decrypt (tag checked; false when it fails).
bool gcm(bool encrypt, const unsigned char* key, const unsigned char* iv, const std::string& aad,
         const unsigned char* in, std::size_t n, unsigned char* out, unsigned char* tag) {
  EVP_CIPHER_CTX* ctx = EVP_CIPHER_CTX_new();
  int length = 0;
  bool ok = ctx != nullptr && EVP_CipherInit_ex(ctx, EVP_aes_256_gcm(), nullptr, nullptr, nullptr, encrypt) == 1 &&
            EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_IVLEN, static_cast<int>(kIvBytes), nullptr) == 1 &&
            EVP_CipherInit_ex(ctx, nullptr, nullptr, key, iv, encrypt) == 1 &&
            EVP_CipherUpdate(ctx, nullptr, &length, reinterpret_cast<const unsigned char*>(aad.data()),
                             static_cast<int>(aad.size())) == 1;
  ok = ok && (n == 0 || EVP_CipherUpdate(ctx, out, &length, in, static_cast<int>(n)) == 1);
  if (ok && !encrypt) ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_SET_TAG, static_cast<int>(kTagBytes), tag) == 1;
  unsigned char final_block[16];
  ok = ok && EVP_CipherFinal_ex(ctx, final_block, &length) == 1;
  if (ok && encrypt) ok = EVP_CIPHER_CTX_ctrl(ctx, EVP_CTRL_GCM_GET_TAG, static_cast<int>(kTagBytes), tag) == 1;
  EVP_CIPHER_CTX_free(ctx);
  return ok;
}

std::string wrap_aad(const std::string& kek_id) { return "myriad-wrap-v1" + kek_id; }

std::string chunk_aad(const std::string& nonce, std::uint64_t index, bool last) {
  std::string aad = "myriad-chunk-v1" + nonce;
  for (int i = 0; i < 8; ++i) aad.push_back(static_cast<char>(index >> (8 * i)));
  aad.push_back(last ? 1 : 0);
  return aad;
}

std::array<unsigned char, kIvBytes> chunk_iv(const std::string& nonce, std::uint32_t index) {
  std::array<unsigned char, kIvBytes> iv{};
  std::memcpy(iv.data(), nonce.data(), kNonceBytes);
  for (int i = 0; i < 4; ++i)
    iv[kNonceBytes + static_cast<std::size_t>(i)] = static_cast<unsigned char>(index >> (24 - 8 * i));
  return iv;
}

// At least n bytes of `buffer` (grown, never shrunk: no zero-filling on every chunk).
unsigned char* room(std::vector<unsigned char>& buffer, std::size_t n) {
  if (buffer.size() < n) buffer.resize(n);
  return buffer.data();
}

std::string random_bytes(std::size_t n) {
  std::string out(n, '\0');
  MYRIAD_CHECK(RAND_bytes(reinterpret_cast<unsigned char*>(out.data()), static_cast<int>(n)) == 1,
               "encryption: OpenSSL could not draw random bytes");
  return out;
}

bool valid_id(const std::string& id) {
  return !id.empty() && id.size() <= kIdBytes && std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '_' || c == '.';
  });
}

// The data key of `h`, unwrapped with the KEK it names.
std::string unwrap(const Header& h, const KeyRing& keys, const std::string& path) {
  MYRIAD_CHECK(keys.has(h.kek_id), path << ": encrypted under key '" << h.kek_id << "', which the key ring"
                                        << (keys.source().empty() ? "" : " " + keys.source())
                                        << " does not hold (a missing or rotated-out key)");
  std::string data_key(kKeyBytes, '\0');
  Header copy = h;
  const bool ok = gcm(false, reinterpret_cast<const unsigned char*>(keys.key(h.kek_id).data()), h.wrap_iv.data(),
                      wrap_aad(h.kek_id), h.wrapped.data(), kKeyBytes,
                      reinterpret_cast<unsigned char*>(data_key.data()), copy.wrap_tag.data());
  MYRIAD_CHECK(ok, path << ": its data key does not unwrap with key '" << h.kek_id
                        << "' (a wrong key under that id, or a modified header)");
  return data_key;
}

Header wrap(const std::string& data_key, const std::string& nonce, std::uint32_t chunk, const KeyRing& keys) {
  MYRIAD_CHECK(!keys.empty(), "encryption: the key ring holds no key");
  Header h;
  h.chunk = chunk;
  h.kek_id = keys.current_id();
  std::memcpy(h.nonce.data(), nonce.data(), kNonceBytes);
  const std::string iv = random_bytes(kIvBytes);
  std::memcpy(h.wrap_iv.data(), iv.data(), kIvBytes);
  MYRIAD_CHECK(
      gcm(true, reinterpret_cast<const unsigned char*>(keys.key(h.kek_id).data()), h.wrap_iv.data(), wrap_aad(h.kek_id),
          reinterpret_cast<const unsigned char*>(data_key.data()), kKeyBytes, h.wrapped.data(), h.wrap_tag.data()),
      "encryption: OpenSSL could not wrap a data key");
  return h;
}

// `path` created (or truncated) for writing with mode 0600: an encrypted artefact is its owner's
// alone whatever the umask. Null when it cannot be.
std::FILE* create_private(const std::string& path) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) return nullptr;
  ::fchmod(fd, 0600);  // an existing file keeps its mode through O_TRUNC
  std::FILE* file = ::fdopen(fd, "wb");
  if (file == nullptr) ::close(fd);
  return file;
}

// Header and its file: reads and decodes the first bytes of `path` (opened as `file`).
Header read_header(std::FILE* file, const std::string& path) {
  unsigned char bytes[sizeof kMagic + kHeaderBytes];
  MYRIAD_CHECK(
      std::fread(bytes, 1, sizeof bytes, file) == sizeof bytes && std::memcmp(bytes, kMagic, sizeof kMagic) == 0,
      path << ": not an encrypted myriad file (no MYRIADE1 header)");
  return decode(bytes + sizeof kMagic, path);
}

}  // namespace

KeyRing KeyRing::load(const std::string& path) {
  std::ifstream in(path);
  MYRIAD_CHECK(in, "key file '" << path << "' cannot be read");
  KeyRing ring;
  ring.source_ = path;
  std::string line, current;
  for (int n = 1; std::getline(in, line); ++n) {
    if (const auto hash = line.find('#'); hash != std::string::npos) line.resize(hash);
    std::istringstream words(line);
    std::string kind, id, hex, extra;
    if (!(words >> kind)) continue;
    const std::string at = "key file '" + path + "' line " + std::to_string(n);
    if (kind == "current") {
      MYRIAD_CHECK(words >> id && !(words >> extra), at << ": 'current <id>'");
      current = id;
      continue;
    }
    MYRIAD_CHECK(kind == "key" && words >> id >> hex && !(words >> extra),
                 at << ": 'key <id> <64 hex digits>' or 'current <id>'");
    MYRIAD_CHECK(valid_id(id), at << ": id must be 1-64 letters, digits, '-', '_' or '.'");
    MYRIAD_CHECK(hex.size() == 2 * kKeyBytes &&
                     std::all_of(hex.begin(), hex.end(),
                                 [](char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }),
                 at << ": key '" << id << "' is not 64 hex digits (32 bytes)");
    MYRIAD_CHECK(!ring.has(id), at << ": key '" << id << "' listed twice");
    std::string bytes;
    for (std::size_t i = 0; i < hex.size(); i += 2)
      bytes.push_back(static_cast<char>(std::stoi(hex.substr(i, 2), nullptr, 16)));
    ring.keys_[id] = bytes;
  }
  MYRIAD_CHECK(!ring.keys_.empty(), "key file '" << path << "' holds no key");
  if (current.empty() && ring.keys_.size() == 1) current = ring.keys_.begin()->first;
  MYRIAD_CHECK(!current.empty(), "key file '" << path << "' holds several keys and no 'current <id>' line");
  MYRIAD_CHECK(ring.has(current), "key file '" << path << "': current key '" << current << "' is not listed");
  ring.current_ = current;
  return ring;
}

void KeyRing::add(const std::string& id, const std::string& key_bytes, bool make_current) {
  MYRIAD_CHECK(valid_id(id), "key ring: id '" << id << "' must be 1-64 letters, digits, '-', '_' or '.'");
  MYRIAD_CHECK(key_bytes.size() == kKeyBytes, "key ring: key '" << id << "' must be 32 bytes");
  keys_[id] = key_bytes;
  if (make_current || current_.empty()) current_ = id;
}

const std::string& KeyRing::key(const std::string& id) const {
  const auto it = keys_.find(id);
  MYRIAD_CHECK(it != keys_.end(), "key ring" << (source_.empty() ? "" : " " + source_) << ": no key '" << id << "'");
  return it->second;
}

bool is_encrypted_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  char magic[sizeof kMagic];
  return in.read(magic, sizeof magic) && std::memcmp(magic, kMagic, sizeof kMagic) == 0;
}

std::string encrypted_file_key_id(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  MYRIAD_CHECK(file != nullptr, path << ": cannot be read (" << std::strerror(errno) << ")");
  try {
    const Header header = read_header(file, path);
    std::fclose(file);
    return header.kek_id;
  } catch (...) {
    std::fclose(file);
    throw;
  }
}

EncryptedWriter::EncryptedWriter(const std::string& path, const KeyRing& keys, std::size_t chunk_bytes, bool sync)
    : path_(path),
      data_key_(random_bytes(kKeyBytes)),
      nonce_(random_bytes(kNonceBytes)),
      chunk_bytes_(chunk_bytes),
      sync_(sync) {
  MYRIAD_CHECK(chunk_bytes >= 16 && chunk_bytes <= (1u << 30),
               "encryption: chunk size " << chunk_bytes << " out of range");
  const Header header = wrap(data_key_, nonce_, static_cast<std::uint32_t>(chunk_bytes), keys);
  file_ = create_private(path);
  MYRIAD_CHECK(file_ != nullptr, path << ": cannot be created (" << std::strerror(errno) << ")");
  try {  // a constructor that throws runs no destructor: the file is closed here
    const auto encoded = encode(header);
    MYRIAD_CHECK(std::fwrite(kMagic, 1, sizeof kMagic, file_) == sizeof kMagic &&
                     std::fwrite(encoded.data(), 1, encoded.size(), file_) == encoded.size(),
                 path << ": cannot be written");
    detail::pace_writeback(file_, sizeof kMagic + encoded.size(), written_, writeback_from_);
    pending_.reserve(chunk_bytes);
  } catch (...) {
    std::fclose(file_);
    throw;
  }
}

EncryptedWriter::~EncryptedWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

void EncryptedWriter::seal(const unsigned char* data, std::size_t n, bool last) {
  flush_batch();
  unsigned char* out = room(sealed_, n + kTagBytes);
  const auto iv = chunk_iv(nonce_, index_);
  MYRIAD_CHECK(gcm(true, reinterpret_cast<const unsigned char*>(data_key_.data()), iv.data(),
                   chunk_aad(nonce_, index_, last), data, n, out, out + n),
               path_ << ": OpenSSL could not encrypt chunk " << index_);
  MYRIAD_CHECK(std::fwrite(out, 1, n + kTagBytes, file_) == n + kTagBytes, path_ << ": cannot be written");
  detail::pace_writeback(file_, n + kTagBytes, written_, writeback_from_);
  MYRIAD_CHECK(index_ < 0xffffffffu, path_ << ": too many chunks");
  ++index_;
}

void EncryptedWriter::flush_batch() {
  if (!unwritten_) return;
  const std::size_t n = batch_bytes_;
  unwritten_ = false;
  MYRIAD_CHECK(std::fwrite(batches_[ready_].data(), 1, n, file_) == n, path_ << ": cannot be written");
  detail::pace_writeback(file_, n, written_, writeback_from_);
}

void EncryptedWriter::seal_batch(const unsigned char* data, std::size_t k) {
  // Double-buffered: while the OpenMP team seals this batch, one of its threads writes the
  // previous one (written in order: each batch goes out before the next is handed over).
  const std::size_t sealed = chunk_bytes_ + kTagBytes;
  const int current = ready_ == 0 && unwritten_ ? 1 : 0;
  unsigned char* batch = room(batches_[current], k * sealed);
  MYRIAD_CHECK(index_ + k < 0xffffffffull, path_ << ": too many chunks");
  const unsigned char* key = reinterpret_cast<const unsigned char*>(data_key_.data());
  const unsigned char* previous = unwritten_ ? batches_[ready_].data() : nullptr;
  const std::size_t previous_bytes = batch_bytes_;
  int failed = 0;
  bool written = true;
#pragma omp parallel reduction(+ : failed)
  {
#pragma omp single nowait
    if (previous != nullptr) {
      written = std::fwrite(previous, 1, previous_bytes, file_) == previous_bytes;
      detail::pace_writeback(file_, previous_bytes, written_, writeback_from_);
    }
#pragma omp for schedule(dynamic, 1)
    for (std::size_t i = 0; i < k; ++i) {
      const std::uint32_t index = index_ + static_cast<std::uint32_t>(i);
      const auto iv = chunk_iv(nonce_, index);
      unsigned char* out = batch + i * sealed;
      failed += gcm(true, key, iv.data(), chunk_aad(nonce_, index, false), data + i * chunk_bytes_, chunk_bytes_, out,
                    out + chunk_bytes_)
                    ? 0
                    : 1;
    }
  }
  unwritten_ = false;
  MYRIAD_CHECK(written, path_ << ": cannot be written");
  MYRIAD_CHECK(failed == 0, path_ << ": OpenSSL could not encrypt chunks " << index_ << "-" << index_ + k - 1);
  ready_ = current;
  unwritten_ = true;
  batch_bytes_ = k * sealed;
  index_ += static_cast<std::uint32_t>(k);
}

void EncryptedWriter::write(const void* data, std::size_t n) {
  MYRIAD_CHECK(file_ != nullptr, path_ << ": written after finish()");
  const auto* p = static_cast<const unsigned char*>(data);
  while (n > 0) {
    if (pending_.empty() && n >= chunk_bytes_) {  // whole chunks (never the last), from the caller's bytes
      const std::size_t k = std::min(n / chunk_bytes_, kBatchChunks);
      seal_batch(p, k);
      p += k * chunk_bytes_;
      n -= k * chunk_bytes_;
      continue;
    }
    const std::size_t take = std::min(n, chunk_bytes_ - pending_.size());
    pending_.insert(pending_.end(), p, p + take);
    p += take;
    n -= take;
    if (pending_.size() == chunk_bytes_) {
      seal_batch(pending_.data(), 1);
      pending_.clear();
    }
  }
}

void EncryptedWriter::finish() {
  MYRIAD_CHECK(file_ != nullptr, path_ << ": finish() called twice");
  seal(pending_.data(), pending_.size(), true);
  pending_.clear();
  const bool ok = std::fflush(file_) == 0 && (!sync_ || fsync(fileno(file_)) == 0);
  std::fclose(file_);
  file_ = nullptr;
  MYRIAD_CHECK(ok, path_ << ": cannot be written (" << std::strerror(errno) << ")");
}

EncryptedReader::EncryptedReader(const std::string& path, const KeyRing& keys) : path_(path) {
  file_ = std::fopen(path.c_str(), "rb");
  MYRIAD_CHECK(file_ != nullptr, path << ": cannot be read (" << std::strerror(errno) << ")");
  try {  // a constructor that throws runs no destructor: the file is closed here
    file_size_ = std::filesystem::file_size(path);
    const Header header = read_header(file_, path);
    chunk_bytes_ = header.chunk;
    kek_id_ = header.kek_id;
    nonce_.assign(reinterpret_cast<const char*>(header.nonce.data()), kNonceBytes);
    data_key_ = unwrap(header, keys, path);
    offset_ = sizeof kMagic + kHeaderBytes;
  } catch (...) {
    std::fclose(file_);
    throw;
  }
}

EncryptedReader::~EncryptedReader() {
  if (file_ != nullptr) std::fclose(file_);
}

std::int64_t EncryptedReader::open_chunk(unsigned char* into) {
  if (done_) return -1;
  const std::uint64_t remaining = file_size_ - offset_;
  MYRIAD_CHECK(remaining >= kTagBytes, path_ << ": truncated at byte " << file_size_ << " (chunk " << index_
                                             << " at byte " << offset_
                                             << " is missing or cut; the final chunk never came)");
  const bool last = remaining - kTagBytes < chunk_bytes_;
  const std::size_t n = last ? static_cast<std::size_t>(remaining - kTagBytes) : chunk_bytes_;
  unsigned char* sealed = room(sealed_, n + kTagBytes);
  MYRIAD_CHECK(std::fread(sealed, 1, n + kTagBytes, file_) == n + kTagBytes, path_ << ": cannot be read");
  unsigned char* plain = into;
  if (plain == nullptr) {
    plain_.resize(n);
    plain = plain_.data();
  } else {
    plain_.clear();
  }
  const auto iv = chunk_iv(nonce_, index_);
  MYRIAD_CHECK(gcm(false, reinterpret_cast<const unsigned char*>(data_key_.data()), iv.data(),
                   chunk_aad(nonce_, index_, last), sealed, n, plain, sealed + n),
               path_ << ": chunk " << index_ << " at byte " << offset_
                     << " fails authentication (modified, reordered, from another file, or the file was cut)");
  offset_ += n + kTagBytes;
  ++index_;
  at_ = 0;
  done_ = last;
  return static_cast<std::int64_t>(n);
}

void EncryptedReader::open_batch(unsigned char* into, std::size_t k) {
  const std::size_t sealed = chunk_bytes_ + kTagBytes;
  // Full-size chunks followed by more bytes than a tag: none of them is the final chunk.
  MYRIAD_CHECK(file_size_ - offset_ > k * sealed, path_ << ": truncated at byte " << file_size_ << " (after chunk "
                                                        << index_ + k - 1 << "; the final chunk never came)");
  unsigned char* batch = room(sealed_, k * sealed);
  MYRIAD_CHECK(std::fread(batch, 1, k * sealed, file_) == k * sealed, path_ << ": cannot be read");
  const unsigned char* key = reinterpret_cast<const unsigned char*>(data_key_.data());
  std::size_t first_bad = k;
#pragma omp parallel for schedule(static) reduction(min : first_bad)
  for (std::size_t i = 0; i < k; ++i) {
    const std::uint32_t index = index_ + static_cast<std::uint32_t>(i);
    const auto iv = chunk_iv(nonce_, index);
    unsigned char* in = batch + i * sealed;
    if (!gcm(false, key, iv.data(), chunk_aad(nonce_, index, false), in, chunk_bytes_, into + i * chunk_bytes_,
             in + chunk_bytes_))
      first_bad = std::min(first_bad, i);
  }
  MYRIAD_CHECK(first_bad == k, path_ << ": chunk " << index_ + first_bad << " at byte " << offset_ + first_bad * sealed
                                     << " fails authentication (modified, reordered, from another file, or the "
                                        "file was cut)");
  offset_ += k * sealed;
  index_ += static_cast<std::uint32_t>(k);
  plain_.clear();
  at_ = 0;
}

std::size_t EncryptedReader::read(void* out, std::size_t n) {
  auto* p = static_cast<unsigned char*>(out);
  std::size_t given = 0;
  while (given < n) {
    if (at_ == plain_.size()) {
      const std::size_t whole =
          std::min<std::size_t>({(n - given) / chunk_bytes_, kBatchChunks,
                                 static_cast<std::size_t>((file_size_ - offset_) / (chunk_bytes_ + kTagBytes))});
      if (!done_ && whole >= 2) {  // whole chunks wanted, none of them the last: a parallel batch, in place
        open_batch(p + given, whole);
        given += whole * chunk_bytes_;
        continue;
      }
      if (n - given >= chunk_bytes_) {  // a whole chunk wanted: decrypted in place
        const std::int64_t got = open_chunk(p + given);
        if (got < 0) break;
        given += static_cast<std::size_t>(got);
        if (done_) break;
        continue;
      }
      if (open_chunk() < 0) break;
    }
    const std::size_t take = std::min(n - given, plain_.size() - at_);
    if (take == 0) {  // an empty final chunk
      if (done_) break;
      continue;
    }
    std::memcpy(p + given, plain_.data() + at_, take);
    at_ += take;
    given += take;
  }
  return given;
}

std::string EncryptedWriter::file_id() const {
  return to_hex(reinterpret_cast<const unsigned char*>(nonce_.data()), nonce_.size());
}
std::string EncryptedReader::file_id() const {
  return to_hex(reinterpret_cast<const unsigned char*>(nonce_.data()), nonce_.size());
}

std::uint64_t EncryptedReader::plain_size() const {
  const std::uint64_t body = file_size_ - (sizeof kMagic + kHeaderBytes), sealed = chunk_bytes_ + kTagBytes;
  const std::uint64_t rest = body % sealed;  // the final chunk: fewer than C bytes and its tag
  MYRIAD_CHECK(rest >= kTagBytes,
               path_ << ": truncated at byte " << file_size_ << " (the final chunk is missing or cut)");
  return body / sealed * chunk_bytes_ + (rest - kTagBytes);
}

void EncryptedReader::seek(std::uint64_t offset) {
  const std::uint64_t size = plain_size();
  MYRIAD_CHECK(offset <= size, path_ << ": seek to plaintext byte " << offset << " past its end (" << size << ")");
  const std::uint64_t chunk = offset / chunk_bytes_;
  if (index_ != chunk + 1 || plain_.empty()) {  // else the chunk in hand holds it
    offset_ = sizeof kMagic + kHeaderBytes + chunk * (chunk_bytes_ + kTagBytes);
    MYRIAD_CHECK(std::fseek(file_, static_cast<long>(offset_), SEEK_SET) == 0, path_ << ": cannot seek");
    index_ = static_cast<std::uint32_t>(chunk);
    done_ = false;
    plain_.clear();
    at_ = 0;
    open_chunk();  // the chunk holding `offset` (an empty final chunk when offset == size at a boundary)
  }
  at_ = static_cast<std::size_t>(offset - chunk * chunk_bytes_);
}

std::string read_encrypted_file(const std::string& path, const KeyRing& keys) {
  EncryptedReader reader(path, keys);
  std::string out, block(1 << 20, '\0');
  while (const std::size_t n = reader.read(block.data(), block.size())) out.append(block.data(), n);
  return out;
}

void write_encrypted_file(const std::string& path, const std::string& data, const KeyRing& keys) {
  const std::string temporary = path + ".partial";
  {
    EncryptedWriter writer(temporary, keys);
    writer.write(data.data(), data.size());
    writer.finish();
  }
  std::filesystem::rename(temporary, path);
}

std::uint64_t decrypt_file(const std::string& path, const std::string& out, const KeyRing& keys) {
  EncryptedReader reader(path, keys);
  detail::TempFile staged(out + ".tmp");  // removed unless committed
  std::uint64_t total = 0;
  std::vector<unsigned char> block(16u << 20);
  while (const std::size_t n = reader.read(block.data(), block.size())) {
    staged.write_at(block.data(), n, static_cast<off_t>(total));
    total += n;
  }
  staged.sync_and_close();
  staged.commit_as(out);
  return total;
}

std::string rewrap(const std::string& path, const KeyRing& keys) {
  std::FILE* file = std::fopen(path.c_str(), "rb");
  MYRIAD_CHECK(file != nullptr, path << ": cannot be read (" << std::strerror(errno) << ")");
  const Header old = read_header(file, path);
  Header fresh;
  try {
    fresh = wrap(unwrap(old, keys, path), std::string(reinterpret_cast<const char*>(old.nonce.data()), kNonceBytes),
                 old.chunk, keys);
  } catch (...) {
    std::fclose(file);
    throw;
  }
  const std::string temporary = path + ".rewrap";
  std::FILE* out = create_private(temporary);
  bool ok = out != nullptr;
  const auto encoded = encode(fresh);
  ok = ok && std::fwrite(kMagic, 1, sizeof kMagic, out) == sizeof kMagic &&
       std::fwrite(encoded.data(), 1, encoded.size(), out) == encoded.size();
  std::vector<char> block(1 << 20);
  while (ok) {  // the ciphertext as it is
    const std::size_t n = std::fread(block.data(), 1, block.size(), file);
    if (n == 0) break;
    ok = std::fwrite(block.data(), 1, n, out) == n;
  }
  std::fclose(file);
  if (out != nullptr) {
    ok = std::fflush(out) == 0 && fsync(fileno(out)) == 0 && ok;
    std::fclose(out);
  }
  MYRIAD_CHECK(ok, temporary << ": cannot be written while rewrapping " << path);
  std::filesystem::rename(temporary, path);
  return old.kek_id;
}

}  // namespace myriad::data
