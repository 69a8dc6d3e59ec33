// AuditLog: the format of python/myriad/audit.py written from C++ (serve/audit_log.h).
#include "myriad/data/audit_log.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>
#include <pwd.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <vector>

#include "myriad/data/digests.h"
#include "myriad/core/error.h"

namespace myriad::data {

namespace {

constexpr int kAuditFormat = 1;
constexpr std::size_t kMinKeyBytes = 32;
constexpr const char* kHeaderAction = "audit.log_created";

// The canonical bytes audit.py's canonical() gives for the same values (sorted keys, no spaces,
// UTF-8 unescaped, control characters as \u00xx).
std::string canonical(const nlohmann::json& record) {
  return record.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

std::string genesis(const std::string& log_id) {
  return sha256_hex("myriad-audit-v" + std::to_string(kAuditFormat) + ":" + log_id);
}

// A stored line's bytes without its top-level "mac" member (what the MAC covers), or "" when the
// line has none. In canonical form the top-level mac sits between "details" and "prev":
// ...,"mac":"<64 hex>","prev":"...
std::string without_mac(const std::string& line) {
  const std::string opening = ",\"mac\":\"";
  const std::size_t at = line.rfind(opening);
  if (at == std::string::npos) return {};
  const std::size_t value = at + opening.size();
  if (line.size() < value + 64 + 9 || line.compare(value + 64, 9, "\",\"prev\":") != 0) return {};
  return line.substr(0, at) + line.substr(value + 65);
}

// Whether a stored line's "mac" is the HMAC of its bytes without it (what audit.py's mac_ok checks).
bool line_mac_ok(const std::string& line, const nlohmann::json& parsed, const std::string& key) {
  const std::string body = without_mac(line);
  if (body.empty() || !parsed.contains("mac") || !parsed["mac"].is_string()) return false;
  const std::string mac = parsed["mac"].get<std::string>(), expected = hmac_sha256_hex(key, body);
  return mac.size() == expected.size() && CRYPTO_memcmp(mac.data(), expected.data(), mac.size()) == 0;
}

std::string utc_now() {
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch()).count() % 1000000;
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char text[40];
  std::strftime(text, sizeof text, "%Y-%m-%dT%H:%M:%S", &utc);
  char out[80];
  std::snprintf(out, sizeof out, "%s.%06lldZ", text, static_cast<long long>(micros));
  return out;
}

nlohmann::json actor(const std::string& api_key_id) {
  std::string user;
  if (const passwd* entry = getpwuid(getuid()); entry != nullptr && entry->pw_name != nullptr) {
    user = entry->pw_name;
  } else {
    user = "uid:" + std::to_string(getuid());
  }
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  return {{"os_user", user},
          {"host", std::string(host)},
          {"pid", static_cast<std::int64_t>(getpid())},
          {"api_key_id", api_key_id.empty() ? nlohmann::json(nullptr) : nlohmann::json(api_key_id)}};
}

class FileLock {
 public:
  explicit FileLock(int fd) : fd_(fd) { flock(fd_, LOCK_EX); }
  ~FileLock() { flock(fd_, LOCK_UN); }
  FileLock(const FileLock&) = delete;
  FileLock& operator=(const FileLock&) = delete;

 private:
  int fd_;
};

std::string read_all(int fd) {
  std::string data;
  char buffer[1 << 16];
  off_t offset = 0;
  for (;;) {
    const ssize_t n = pread(fd, buffer, sizeof buffer, offset);
    if (n <= 0) break;
    data.append(buffer, static_cast<std::size_t>(n));
    offset += n;
  }
  return data;
}

// The first problem of the log's bytes under `key`, "" when it verifies (MACs, seq, chain).
std::string first_problem(const std::string& data, const std::string& key) {
  if (!data.empty() && data.back() != '\n') return "its last line is not a complete record (truncated)";
  std::string expected_prev;
  std::int64_t expected_seq = 1;
  std::size_t begin = 0;
  for (std::int64_t n = 1; begin < data.size(); ++n) {
    const std::size_t end = data.find('\n', begin);
    const std::string line = data.substr(begin, end - begin);
    begin = end + 1;
    const std::string record = "record " + std::to_string(n) + ": ";
    const nlohmann::json parsed = nlohmann::json::parse(line, nullptr, false);
    if (parsed.is_discarded() || !parsed.is_object() || !parsed.contains("seq") || !parsed["seq"].is_number_integer() ||
        !parsed.contains("prev") || !parsed["prev"].is_string() || !parsed.contains("mac") ||
        !parsed["mac"].is_string())
      return record + "not a JSON record with the audit fields";
    if (!line_mac_ok(line, parsed, key))
      return record + (n == 1 ? "MAC mismatch (wrong key or modified first record)" : "MAC mismatch (modified)");
    if (parsed["seq"].get<std::int64_t>() != expected_seq)
      return record + "seq " + std::to_string(parsed["seq"].get<std::int64_t>()) + " where seq " +
             std::to_string(expected_seq) + " belongs (deleted, inserted or reordered)";
    if (n == 1) {
      const nlohmann::json& details = parsed.value("details", nlohmann::json::object());
      const std::string log_id = details.is_object() ? details.value("log_id", std::string()) : std::string();
      if (parsed.value("action", std::string()) != kHeaderAction || log_id.empty() ||
          parsed["prev"].get<std::string>() != genesis(log_id))
        return record + "not the log's header record";
    } else if (parsed["prev"].get<std::string>() != expected_prev) {
      return record + "its prev does not chain to the record before it (inserted)";
    }
    expected_prev = sha256_hex(line);
    ++expected_seq;
  }
  return {};
}

}  // namespace

std::string AuditLog::key_from_environment() {
  const char* path = std::getenv("MYRIAD_AUDIT_KEY_FILE");
  if (path == nullptr || *path == '\0') return {};
  std::ifstream in(path, std::ios::binary);
  MYRIAD_CHECK(in, "audit key file '" << path << "' (MYRIAD_AUDIT_KEY_FILE) cannot be read");
  const std::string key((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  MYRIAD_CHECK(key.size() >= kMinKeyBytes, "audit key file '" << path << "' holds " << key.size() << " bytes; at least "
                                                              << kMinKeyBytes << " random bytes are needed");
  struct stat info {};
  if (stat(path, &info) == 0 && (info.st_mode & 077) != 0)
    std::cerr << "warning: audit key file '" << path << "' is readable by group or others; chmod 600 it" << std::endl;
  return key;
}

AuditLog::AuditLog(std::string path, std::string key) : path_(std::move(path)), key_(std::move(key)) {
  MYRIAD_CHECK(key_.size() >= kMinKeyBytes,
               "the audit key has " << key_.size() << " bytes; at least " << kMinKeyBytes << " are needed");
  fd_ = open(path_.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  read_fd_ = fd_ >= 0 ? open(path_.c_str(), O_RDONLY | O_CLOEXEC) : -1;
  if (fd_ < 0 || read_fd_ < 0) {
    const std::string reason = std::strerror(errno);
    if (fd_ >= 0) close(fd_);
    MYRIAD_CHECK(false, "audit log '" << path_ << "' cannot be opened: " << reason);
  }
  std::string refused;
  try {  // a constructor that throws runs no destructor: the files are closed here
    FileLock lock(fd_);
    const std::string data = read_all(read_fd_);
    if (data.empty()) {
      unsigned char id[16];
      RAND_bytes(id, sizeof id);
      const std::string log_id = to_hex(id, sizeof id);
      write({{"seq", 1},
             {"prev", genesis(log_id)},
             {"action", kHeaderAction},
             {"target", path_},
             {"result", "ok"},
             {"details", {{"format", kAuditFormat}, {"log_id", log_id}, {"previous_log_final_hash", nullptr}}}},
            {});
    } else {
      refused = first_problem(data, key_);
    }
  } catch (...) {
    close(fd_);
    close(read_fd_);
    throw;
  }
  if (!refused.empty()) {
    close(fd_);
    close(read_fd_);
    MYRIAD_CHECK(false, "refusing to append to audit log '" << path_ << "': " << refused);
  }
}

AuditLog::~AuditLog() {
  if (fd_ >= 0) close(fd_);
  if (read_fd_ >= 0) close(read_fd_);
}

std::string AuditLog::last_line() const {
  struct stat info {};
  fstat(read_fd_, &info);
  const off_t size = info.st_size;
  if (size == 0) return {};
  std::string tail;
  for (off_t block = 4096;; block *= 2) {
    const off_t begin = std::max<off_t>(0, size - 1 - block);
    tail.resize(static_cast<std::size_t>(size - begin));
    const ssize_t n = pread(read_fd_, tail.data(), tail.size(), begin);
    MYRIAD_CHECK(n == static_cast<ssize_t>(tail.size()), "audit log '" << path_ << "' cannot be read");
    MYRIAD_CHECK(tail.back() == '\n',
                 "refusing to append to audit log '" << path_ << "': its last line is not a complete record");
    const std::size_t cut = tail.rfind('\n', tail.size() - 2);
    if (cut != std::string::npos) return tail.substr(cut + 1, tail.size() - cut - 2);
    if (begin == 0) return tail.substr(0, tail.size() - 1);
  }
}

void AuditLog::write(nlohmann::json record, const std::string& api_key_id) {
  record["time"] = utc_now();
  record["actor"] = actor(api_key_id);
  record["mac"] = hmac_sha256_hex(key_, canonical(record));
  const std::string line = canonical(record) + "\n";
  MYRIAD_CHECK(::write(fd_, line.data(), line.size()) == static_cast<ssize_t>(line.size()) && fsync(fd_) == 0,
               "audit log '" << path_ << "' cannot be written: " << std::strerror(errno));
}

void AuditLog::append(const std::string& action, const std::string& target, const std::string& result,
                      const nlohmann::json& details, const std::string& api_key_id) {
  std::lock_guard guard(mutex_);
  FileLock lock(fd_);
  const std::string last = last_line();
  MYRIAD_CHECK(!last.empty(), "refusing to append to audit log '" << path_ << "': it is empty (no header record)");
  const nlohmann::json parsed = nlohmann::json::parse(last, nullptr, false);
  MYRIAD_CHECK(!parsed.is_discarded() && parsed.contains("seq") && parsed["seq"].is_number_integer() &&
                   line_mac_ok(last, parsed, key_),
               "refusing to append to audit log '" << path_
                                                   << "': its last record does not verify (modified, truncated or "
                                                      "another key)");
  write({{"seq", parsed["seq"].get<std::int64_t>() + 1},
         {"prev", sha256_hex(last)},
         {"action", action},
         {"target", target},
         {"result", result},
         {"details", details.is_object() ? details : nlohmann::json::object()}},
        api_key_id);
}

std::string file_sha256(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MYRIAD_CHECK(in, "cannot read " << path << " to digest it");
  EVP_MD_CTX* context = EVP_MD_CTX_new();
  EVP_DigestInit_ex(context, EVP_sha256(), nullptr);
  std::vector<char> buffer(1 << 20);
  while (in) {
    in.read(buffer.data(), static_cast<std::streamsize>(buffer.size()));
    if (in.gcount() > 0) EVP_DigestUpdate(context, buffer.data(), static_cast<std::size_t>(in.gcount()));
  }
  unsigned char out[EVP_MAX_MD_SIZE];
  unsigned int n = 0;
  EVP_DigestFinal_ex(context, out, &n);
  EVP_MD_CTX_free(context);
  return to_hex(out, n);
}

std::unique_ptr<AuditLog> open_audit_log_near(const std::string& artefact) {
  const std::string key = AuditLog::key_from_environment();
  if (key.empty()) {
    std::cerr << "info: no audit key (MYRIAD_AUDIT_KEY_FILE unset): the audit log is not written" << std::endl;
    return nullptr;
  }
  std::string path = "audit.jsonl";
  if (const char* named = std::getenv("MYRIAD_AUDIT_LOG"); named != nullptr && *named != '\0') {
    path = named;
  } else {
    const std::filesystem::path here = std::filesystem::absolute(artefact);
    for (const std::filesystem::path& folder : {here.parent_path(), here.parent_path().parent_path()}) {
      if (std::filesystem::exists(folder / "audit.jsonl")) {
        path = (folder / "audit.jsonl").string();
        break;
      }
    }
  }
  return std::make_unique<AuditLog>(path, key);
}

}  // namespace myriad::data
