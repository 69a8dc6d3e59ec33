// AtRest: clear and encrypted stored files behind one reader/writer interface (data/at_rest.h).
#include "myriad/data/at_rest.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "myriad/core/error.h"
#include "writeback.h"

namespace myriad::data {

namespace {

std::string key_hint(const std::string& path) {
  return path + " is encrypted under key '" + encrypted_file_key_id(path) +
         "' and no key file is set: name the file holding that key with security.key_file (training) or $" +
         kKeyFileVariable;
}

class ClearReader final : public StoredFileReader {
 public:
  explicit ClearReader(const std::string& path) : path_(path), fd_(::open(path.c_str(), O_RDONLY | O_CLOEXEC)) {
    MYRIAD_CHECK(fd_ >= 0, path << ": cannot be read (" << std::strerror(errno) << ")");
  }
  ~ClearReader() override { ::close(fd_); }
  ClearReader(const ClearReader&) = delete;
  ClearReader& operator=(const ClearReader&) = delete;

  std::uint64_t size() override {
    struct stat info {};
    MYRIAD_CHECK(::fstat(fd_, &info) == 0, path_ << ": cannot be stat'ed (" << std::strerror(errno) << ")");
    return static_cast<std::uint64_t>(info.st_size);
  }
  void read_at(std::uint64_t offset, void* out, std::size_t n) override {
    auto* p = static_cast<char*>(out);
    while (n > 0) {
      const ssize_t got = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (got < 0 && errno == EINTR) continue;
      MYRIAD_CHECK(got > 0, path_ << ": bytes from " << offset << " cannot be read ("
                                  << (got == 0 ? "the file ends there" : std::strerror(errno)) << ")");
      p += got;
      n -= static_cast<std::size_t>(got);
      offset += static_cast<std::uint64_t>(got);
    }
  }
  bool encrypted() const override { return false; }
  std::string file_id() const override { return ""; }

 private:
  std::string path_;
  int fd_;
};

class DecryptingReader final : public StoredFileReader {
 public:
  DecryptingReader(const std::string& path, const KeyRing& keys) : path_(path), reader_(path, keys) {}
  std::uint64_t size() override { return reader_.plain_size(); }
  void read_at(std::uint64_t offset, void* out, std::size_t n) override {
    reader_.seek(offset);
    MYRIAD_CHECK(reader_.read(out, n) == n,
                 path_ << ": plaintext bytes [" << offset << ", " << offset + n << ") are past its end");
  }
  bool encrypted() const override { return true; }
  std::string file_id() const override { return reader_.file_id(); }

 private:
  std::string path_;
  EncryptedReader reader_;
};

class ClearWriter final : public StoredFileWriter {
 public:
  ClearWriter(const std::string& path, bool sync) : path_(path), file_(std::fopen(path.c_str(), "wb")), sync_(sync) {
    MYRIAD_CHECK(file_ != nullptr, path << ": cannot be created (" << std::strerror(errno) << ")");
  }
  ~ClearWriter() override {
    if (file_ != nullptr) std::fclose(file_);
  }
  ClearWriter(const ClearWriter&) = delete;
  ClearWriter& operator=(const ClearWriter&) = delete;

  void write(const void* data, std::size_t n) override {
    const auto* bytes = static_cast<const char*>(data);
    while (n > 0) {  // in steps, so write-back starts while the rest is copied
      const std::size_t step = std::min<std::size_t>(n, detail::kWritebackStepBytes);
      MYRIAD_CHECK(file_ != nullptr && std::fwrite(bytes, 1, step, file_) == step,
                   path_ << ": cannot be written (" << std::strerror(errno) << "; disk full?)");
      detail::pace_writeback(file_, step, written_, writeback_from_);
      bytes += step;
      n -= step;
    }
  }
  void finish() override {
    MYRIAD_CHECK(file_ != nullptr, path_ << ": finished twice");
    const bool ok = std::fflush(file_) == 0 && (!sync_ || ::fsync(::fileno(file_)) == 0);
    const bool closed = std::fclose(file_) == 0;
    file_ = nullptr;
    MYRIAD_CHECK(ok && closed, path_ << ": cannot be written (" << std::strerror(errno) << "; disk full?)");
  }
  std::string file_id() const override { return ""; }

 private:
  std::string path_;
  std::FILE* file_;
  bool sync_;
  std::uint64_t written_ = 0, writeback_from_ = 0;  // detail::pace_writeback
};

class EncryptingWriter final : public StoredFileWriter {
 public:
  EncryptingWriter(const std::string& path, const KeyRing& keys, std::size_t chunk_bytes, bool sync)
      : writer_(path, keys, chunk_bytes, sync) {}
  void write(const void* data, std::size_t n) override { writer_.write(data, n); }
  void finish() override { writer_.finish(); }
  std::string file_id() const override { return writer_.file_id(); }

 private:
  EncryptedWriter writer_;
};

}  // namespace

AtRest AtRest::from_key_file(const std::string& configured, const std::string& setting) {
  if (!configured.empty()) {
    try {
      return AtRest(KeyRing::load(configured));
    } catch (const Error& e) {
      MYRIAD_THROW(setting << ": " << e.message());
    }
  }
  const char* named = std::getenv(kKeyFileVariable);
  if (named == nullptr || *named == '\0') return AtRest();
  try {
    return AtRest(KeyRing::load(named));
  } catch (const Error& e) {
    MYRIAD_THROW("$" << kKeyFileVariable << ": " << e.message());
  }
}

std::string AtRest::describe() const {
  if (!encrypts()) return "clear";
  return "AES-256-GCM under key '" + keys_.current_id() + "'" + (keys_.source().empty() ? "" : " of " + keys_.source());
}

std::unique_ptr<StoredFileWriter> AtRest::create(const std::string& path, std::size_t chunk_bytes, bool sync) const {
  if (encrypts()) return std::make_unique<EncryptingWriter>(path, keys_, chunk_bytes, sync);
  return std::make_unique<ClearWriter>(path, sync);
}

std::unique_ptr<StoredFileReader> AtRest::open(const std::string& path) const {
  if (!is_encrypted_file(path)) return std::make_unique<ClearReader>(path);
  MYRIAD_CHECK(encrypts(), key_hint(path));
  return std::make_unique<DecryptingReader>(path, keys_);
}

std::string AtRest::read_all(const std::string& path) const {
  const std::unique_ptr<StoredFileReader> reader = open(path);
  std::string bytes(reader->size(), '\0');
  if (!bytes.empty()) reader->read_at(0, bytes.data(), bytes.size());
  return bytes;
}

void AtRest::write_all(const std::string& path, const std::string& bytes) const {
  const std::unique_ptr<StoredFileWriter> writer = create(path);
  writer->write(bytes.data(), bytes.size());
  writer->finish();
}

void AtRest::check_key(const std::string& path) const {
  if (!is_encrypted_file(path)) return;
  MYRIAD_CHECK(encrypts(), key_hint(path));
  EncryptedReader probe(path, keys_);  // unwraps the data key: throws naming the file and key
}

}  // namespace myriad::data
