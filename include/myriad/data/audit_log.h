// AuditLog — the C++ writer (myriad-serve, myriad-data) of the audit log whose format python/myriad/audit.py defines
// (docs/security.md, "Record format"): one canonical-JSON record per line (sorted keys, no spaces,
// UTF-8), hash-chained (prev = SHA-256 of the previous line's bytes; the header's prev binds the
// log id) and sealed with an HMAC-SHA256 under the audit key of the record's bytes without its
// "mac". `myriad audit verify` checks what this writes, and a log may be continued by either
// writer (training in Python, then the server).
//
// Opening a log: a new or empty file gets its header record (action "audit.log_created", a random
// log id); an existing one is checked whole — every line's MAC, seq and chain, computed on the
// bytes as stored (the "mac" member cut out), so no re-serialisation is involved — and refused,
// naming the first bad record, when it does not verify. append() takes an exclusive flock, checks
// the current last record (another writer may have appended), writes one line with O_APPEND and
// fsyncs. Records hold no secrets: an API key appears only as its id. Thread-safe.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace myriad::data {

class AuditLog {
 public:
  // `key`: the audit key's bytes (>= 32). Throws myriad::Error naming the file and the problem.
  AuditLog(std::string path, std::string key);
  ~AuditLog();
  AuditLog(const AuditLog&) = delete;
  AuditLog& operator=(const AuditLog&) = delete;

  // Appends {seq, prev, action, target, result, details, time, actor: {os_user, host, pid,
  // api_key_id}}; `details` a JSON object of strings, integers, booleans and null (no floats:
  // their text would be this writer's choice). Throws naming the file when it cannot.
  void append(const std::string& action, const std::string& target, const std::string& result,
              const nlohmann::json& details, const std::string& api_key_id = {});
  const std::string& path() const { return path_; }

  // The key named by $MYRIAD_AUDIT_KEY_FILE (>= 32 bytes; a warning on stderr when group or others
  // may read it), or "" when the variable is unset. Throws naming the file when it is unusable.
  static std::string key_from_environment();

 private:
  std::string last_line() const;
  void write(nlohmann::json record, const std::string& api_key_id);

  std::string path_, key_;
  int fd_ = -1, read_fd_ = -1;
  std::mutex mutex_;
};

// The log a C++ tool records into when $MYRIAD_AUDIT_KEY_FILE names a key: $MYRIAD_AUDIT_LOG, else
// the audit.jsonl of the run an artefact belongs to (in the artefact's folder or the one above,
// whichever exists), else ./audit.jsonl. Null without a key (said once on stderr). Throws when the
// key or the log cannot be used (the caller stops before its operation).
std::unique_ptr<AuditLog> open_audit_log_near(const std::string& artefact);

// SHA-256 (hex) of a file's bytes, streamed (the digest `myriad audit` uses for a file; for a
// checkpoint folder, of its manifest.json). Throws naming the file.
std::string file_sha256(const std::string& path);

}  // namespace myriad::data
