// AccessPolicy — who may call which endpoint of `myriad serve` (`--auth FILE`; docs/security.md,
// "Access to the server").
//
// The file (JSON, written by `myriad serve keys`) lists API keys by id, each with its roles and an
// optional rate limit; a key is stored only as its scrypt hash (OpenSSL EVP_PBE_scrypt, per-key
// salt and cost), never in clear:
//   {"format": "myriad-serve-keys-v1", "public": ["/health", "/ready"],
//    "keys": [{"id": "alice", "roles": ["user"], "rate_limit": {"per_second": 20, "burst": 40},
//              "scrypt": {"n": 16384, "r": 8, "p": 1, "salt": "<hex>", "hash": "<hex>"}}]}
// A key is presented as `Authorization: Bearer myr_<id>_<secret>` (what the OpenAI client sends
// for its api_key); the id selects the entry, the whole token is hashed and compared in constant
// time (CRYPTO_memcmp). A verified token is remembered under an HMAC of it with a per-process
// random key, so only a key's first request (and every wrong one) pays the slow hash; unverified
// attempts share one budget of hash computations per second (`max_verifications_per_second`,
// default 20), beyond which they get 429 instead of costing CPU.
//
// Roles and their permissions (a key may hold several; "public" paths need none):
//   viewer   health, ready, metrics
//   user     health, ready, models, completions
//   operator health, ready, metrics, drain
//   admin    every permission, the key list and reloading the file included
// Decisions: 401 (no key, a malformed or unknown key, a wrong secret), 403 (a valid key whose roles
// lack the permission), 429 with Retry-After (the key's rate limit, or the verification budget),
// else allowed. Messages name the key id at most, never a token or a hash.
//
// Thread-safe: decide() from many HTTP threads; reload() re-reads the file (an unreadable or
// invalid file keeps the current keys and throws naming it).
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace myriad::serve {

enum class Permission { health, ready, metrics, models, completions, drain, keys_read, keys_reload };
const char* permission_name(Permission permission);

// The permission an endpoint needs; nullopt for a path the server does not serve (the router's 404).
std::optional<Permission> permission_for(const std::string& method, const std::string& path);

// The roles that hold `permission`, in a fixed order (viewer, user, operator, admin).
std::vector<std::string> roles_holding(Permission permission);

struct AccessDecision {
  int status = 200;        // 200 = allowed; else 401, 403 or 429
  std::string message;     // why not (names the key id at most)
  std::string key_id;      // the authenticated key ("" when none or public)
  double retry_after = 0;  // seconds, for 429
};

struct ApiKeyInfo {
  std::string id;
  std::vector<std::string> roles;
  double per_second = 0, burst = 0;  // 0 = no limit
};

class AccessPolicy {
 public:
  // Reads `path`; throws naming the file and the entry when it is unreadable or invalid.
  explicit AccessPolicy(std::string path);
  ~AccessPolicy();

  // `authorization`: the request's Authorization header ("" when absent).
  AccessDecision decide(const std::string& method, const std::string& path, const std::string& authorization);
  void reload();
  std::vector<ApiKeyInfo> keys() const;
  // The id of the key in `authorization` when it was verified before (decide() let it through), else
  // "" — no hash, no rate limit: for records of who called (the audit log).
  std::string verified_key_id(const std::string& authorization) const;
  const std::string& path() const { return path_; }

 private:
  struct Key;
  struct Table;
  struct Bucket {
    double tokens = 0;
    std::chrono::steady_clock::time_point last;
  };
  std::shared_ptr<const Table> table() const;
  static void read_table(const nlohmann::json& doc, const std::string& where, Table& into);
  // The key a token is (verified now or before), or the failure.
  std::shared_ptr<const Key> authenticate(const std::string& token, AccessDecision& decision);
  // Takes one token from `bucket` (per_second, burst); false with the wait when it is empty.
  static bool take(Bucket& bucket, double per_second, double burst, double& wait);

  std::string path_;
  std::string cache_key_;  // random, per process: the HMAC key of remembered tokens
  mutable std::mutex mutex_;
  std::shared_ptr<const Table> table_;
  std::unordered_map<std::string, std::string> verified_;  // HMAC(token) -> key id
  std::map<std::string, Bucket> limits_;                   // key id -> its bucket
  Bucket verifications_;
};

}  // namespace myriad::serve
