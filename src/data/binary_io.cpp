// Atomic file writing for the data layer's formats (see binary_io.h).
#include "binary_io.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "myriad/core/error.h"

namespace myriad::data::detail {

TempFile::TempFile(std::string path) : path_(std::move(path)) {
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  MYRIAD_CHECK(fd_ >= 0, "cannot create '" << path_ << "': " << std::strerror(errno));
}

TempFile::~TempFile() {
  if (fd_ >= 0) ::close(fd_);
  if (!committed_) ::unlink(path_.c_str());
}

void TempFile::write_at(const void* data, std::size_t size, off_t offset) {
  const auto* p = static_cast<const char*>(data);
  while (size > 0) {
    ssize_t n = ::pwrite(fd_, p, size, offset);
    if (n < 0 && errno == EINTR) continue;
    MYRIAD_CHECK(n > 0, "cannot write '" << path_ << "': " << (n < 0 ? std::strerror(errno) : "no progress"));
    p += n;
    size -= static_cast<std::size_t>(n);
    offset += n;
  }
}

void TempFile::sync_and_close() {
  MYRIAD_CHECK(::fsync(fd_) == 0, "cannot fsync '" << path_ << "': " << std::strerror(errno));
  int result = ::close(fd_);
  fd_ = -1;
  MYRIAD_CHECK(result == 0, "cannot close '" << path_ << "': " << std::strerror(errno));
}

void TempFile::commit_as(const std::string& final_path) {
  MYRIAD_CHECK(::rename(path_.c_str(), final_path.c_str()) == 0,
               "cannot rename '" << path_ << "' to '" << final_path << "': " << std::strerror(errno));
  committed_ = true;
}

StagedStoredFile::StagedStoredFile(std::string path, const AtRest& at_rest, std::size_t chunk_bytes)
    : path_(std::move(path)), staged_(path_ + ".tmp"), out_(at_rest.create(staged_, chunk_bytes)) {}

StagedStoredFile::~StagedStoredFile() {
  out_.reset();  // closes an unfinished file before it is removed
  if (!committed_) ::unlink(staged_.c_str());
}

void StagedStoredFile::commit() {
  out_->finish();
  MYRIAD_CHECK(::rename(staged_.c_str(), path_.c_str()) == 0,
               "cannot rename '" << staged_ << "' to '" << path_ << "': " << std::strerror(errno));
  committed_ = true;
  sync_directory_of(path_);
}

void sync_directory_of(const std::string& path) {
  const std::filesystem::path parent = std::filesystem::path(path).parent_path();
  const std::string directory = parent.empty() ? std::string(".") : parent.string();
  int fd = ::open(directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return;
  ::fsync(fd);
  ::close(fd);
}

Mapping map_read_only(const std::string& path, const std::string& where, std::size_t header_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  MYRIAD_CHECK(fd >= 0, "cannot open " << where << ": " << std::strerror(errno));
  struct stat info {};
  if (::fstat(fd, &info) != 0) {
    const int error = errno;
    ::close(fd);
    MYRIAD_THROW("cannot stat " << where << ": " << std::strerror(error));
  }
  const auto file_bytes = static_cast<std::size_t>(info.st_size);
  if (file_bytes < header_bytes) {
    ::close(fd);
    MYRIAD_THROW(where << ": short header: the file has " << file_bytes << " bytes, a header needs " << header_bytes);
  }
  void* address = ::mmap(nullptr, file_bytes, PROT_READ, MAP_SHARED, fd, 0);
  const int map_error = errno;
  ::close(fd);  // the mapping keeps the file alive
  MYRIAD_CHECK(address != MAP_FAILED, "cannot mmap " << where << ": " << std::strerror(map_error));
  return {address, file_bytes};
}

}  // namespace myriad::data::detail
