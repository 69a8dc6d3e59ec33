// AccessPolicy: the key file, scrypt verification, roles and rate limits (serve/access_policy.h).
#include "myriad/serve/access_policy.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/rand.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>

#include "myriad/data/digests.h"
#include "myriad/core/error.h"

namespace myriad::serve {

namespace {

constexpr const char* kKeysFormat = "myriad-serve-keys-v1";
constexpr const char* kTokenPrefix = "myr_";
constexpr std::size_t kMaxRemembered = 4096;

const std::map<std::string, std::set<Permission>>& role_permissions() {
  using P = Permission;
  static const std::map<std::string, std::set<Permission>> roles = {
      {"viewer", {P::health, P::ready, P::metrics}},
      {"user", {P::health, P::ready, P::models, P::completions}},
      {"operator", {P::health, P::ready, P::metrics, P::drain}},
      {"admin", {P::health, P::ready, P::metrics, P::models, P::completions, P::drain, P::keys_read, P::keys_reload}},
  };
  return roles;
}

bool valid_id(const std::string& id) {
  return !id.empty() && id.size() <= 64 && std::all_of(id.begin(), id.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) != 0 || c == '-' || c == '.';
  });
}

}  // namespace

const char* permission_name(Permission permission) {
  switch (permission) {
    case Permission::health:
      return "health";
    case Permission::ready:
      return "ready";
    case Permission::metrics:
      return "metrics";
    case Permission::models:
      return "models";
    case Permission::completions:
      return "completions";
    case Permission::drain:
      return "drain";
    case Permission::keys_read:
      return "keys_read";
    case Permission::keys_reload:
      return "keys_reload";
  }
  return "?";
}

std::optional<Permission> permission_for(const std::string& method, const std::string& path) {
  static const std::map<std::pair<std::string, std::string>, Permission> endpoints = {
      {{"GET", "/health"}, Permission::health},
      {{"GET", "/ready"}, Permission::ready},
      {{"GET", "/metrics"}, Permission::metrics},
      {{"GET", "/v1/models"}, Permission::models},
      {{"POST", "/v1/completions"}, Permission::completions},
      {{"POST", "/admin/drain"}, Permission::drain},
      {{"GET", "/admin/keys"}, Permission::keys_read},
      {{"POST", "/admin/keys/reload"}, Permission::keys_reload},
  };
  const auto it = endpoints.find({method == "HEAD" ? "GET" : method, path});
  if (it == endpoints.end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> roles_holding(Permission permission) {
  std::vector<std::string> out;
  for (const char* role : {"viewer", "user", "operator", "admin"}) {
    if (role_permissions().at(role).count(permission) != 0) out.emplace_back(role);
  }
  return out;
}

struct AccessPolicy::Key {
  ApiKeyInfo info;
  std::set<Permission> permissions;
  std::string salt, hash;  // bytes
  std::uint64_t n = 0, r = 0, p = 0;
};

struct AccessPolicy::Table {
  std::map<std::string, std::shared_ptr<const Key>> keys;
  std::set<std::string> public_paths = {"/health", "/ready"};
  double verifications_per_second = 20;
};

AccessPolicy::AccessPolicy(std::string path) : path_(std::move(path)) {
  unsigned char secret[32];
  MYRIAD_CHECK(RAND_bytes(secret, sizeof secret) == 1, "--auth: OpenSSL could not draw random bytes");
  cache_key_.assign(reinterpret_cast<const char*>(secret), sizeof secret);
  reload();
  verifications_.tokens = table_->verifications_per_second;
  verifications_.last = std::chrono::steady_clock::now();
}

AccessPolicy::~AccessPolicy() = default;

void AccessPolicy::reload() {
  std::ifstream in(path_, std::ios::binary);
  MYRIAD_CHECK(in, "--auth: cannot read the key file " << path_);
  std::stringstream text;
  text << in.rdbuf();
  nlohmann::json doc;
  try {
    doc = nlohmann::json::parse(text.str());
  } catch (const nlohmann::json::exception& e) {
    MYRIAD_CHECK(false, "--auth: " << path_ << " is not JSON (" << e.what() << ")");
  }
  auto table = std::make_shared<Table>();
  const std::string where = "--auth: " + path_;
  try {
    read_table(doc, where, *table);
  } catch (const nlohmann::json::exception& e) {
    MYRIAD_CHECK(false, where << ": a value of the wrong type (" << e.what() << ")");
  }
  std::lock_guard lock(mutex_);
  table_ = std::move(table);
  verified_.clear();  // a revoked key must verify again (and fail)
}

void AccessPolicy::read_table(const nlohmann::json& doc, const std::string& where, Table& into) {
  Table* table = &into;
  MYRIAD_CHECK(doc.is_object(), where << ": not a JSON object");
  for (const auto& [field, value] : doc.items()) {
    MYRIAD_CHECK(
        field == "format" || field == "public" || field == "keys" || field == "max_verifications_per_second",
        where << ": unknown field '" << excerpt(field, 60) << "' (format, public, keys, max_verifications_per_second)");
  }
  MYRIAD_CHECK(doc.value("format", "") == kKeysFormat, where << ": format is not " << kKeysFormat);
  if (doc.contains("public")) {
    MYRIAD_CHECK(doc["public"].is_array(), where << ": public is not a list of paths");
    table->public_paths.clear();
    for (const auto& p : doc["public"]) {
      const std::string path = p.is_string() ? p.get<std::string>() : "";
      const std::optional<Permission> needs = permission_for("GET", path);
      MYRIAD_CHECK(
          needs && (*needs == Permission::health || *needs == Permission::ready || *needs == Permission::metrics ||
                    *needs == Permission::models),
          where << ": public path '" << excerpt(path, 60) << "' is not one of /health, /ready, /metrics, /v1/models");
      table->public_paths.insert(path);
    }
  }
  if (doc.contains("max_verifications_per_second")) {
    const auto& v = doc["max_verifications_per_second"];
    MYRIAD_CHECK(v.is_number() && v.get<double>() >= 1, where << ": max_verifications_per_second must be >= 1");
    table->verifications_per_second = v.get<double>();
  }
  MYRIAD_CHECK(doc.contains("keys") && doc["keys"].is_array(), where << ": keys is not a list");
  for (const auto& entry : doc["keys"]) {
    MYRIAD_CHECK(entry.is_object(), where << ": a key entry is not an object");
    const std::string id = entry.value("id", "");
    const std::string at = where + ": key '" + excerpt(id, 64) + "'";
    MYRIAD_CHECK(valid_id(id), at << ": id must be 1-64 letters, digits, '-' or '.'");
    MYRIAD_CHECK(table->keys.count(id) == 0, at << ": listed twice");
    for (const auto& [field, value] : entry.items()) {
      MYRIAD_CHECK(
          field == "id" || field == "roles" || field == "rate_limit" || field == "scrypt" || field == "created",
          at << ": unknown field '" << excerpt(field, 60) << "' (id, roles, rate_limit, scrypt, created)");
    }
    auto key = std::make_shared<Key>();
    key->info.id = id;
    MYRIAD_CHECK(entry.contains("roles") && entry["roles"].is_array() && !entry["roles"].empty(),
                 at << ": roles must be a non-empty list");
    for (const auto& role : entry["roles"]) {
      const std::string name = role.is_string() ? role.get<std::string>() : "";
      const auto it = role_permissions().find(name);
      MYRIAD_CHECK(it != role_permissions().end(),
                   at << ": role '" << excerpt(name, 40) << "' is not viewer, user, operator or admin");
      key->info.roles.push_back(name);
      key->permissions.insert(it->second.begin(), it->second.end());
    }
    if (entry.contains("rate_limit")) {
      const auto& limit = entry["rate_limit"];
      MYRIAD_CHECK(limit.is_object() && limit.contains("per_second") && limit["per_second"].is_number() &&
                       limit["per_second"].get<double>() >= 0,
                   at << ": rate_limit.per_second must be a number >= 0");
      key->info.per_second = limit["per_second"].get<double>();
      key->info.burst = limit.value("burst", std::max(1.0, key->info.per_second));
      MYRIAD_CHECK(key->info.burst >= 1, at << ": rate_limit.burst must be >= 1");
    }
    MYRIAD_CHECK(entry.contains("scrypt") && entry["scrypt"].is_object(), at << ": no scrypt hash");
    const auto& s = entry["scrypt"];
    key->n = s.value("n", 0ull);
    key->r = s.value("r", 0ull);
    key->p = s.value("p", 0ull);
    MYRIAD_CHECK(key->n >= 1024 && key->n <= (1ull << 20) && (key->n & (key->n - 1)) == 0 && key->r >= 1 &&
                     key->r <= 32 && key->p >= 1 && key->p <= 16,
                 at << ": scrypt n must be a power of two in [1024, 2^20], r in [1, 32], p in [1, 16]");
    key->salt = data::from_hex(s.value("salt", ""), at + ": scrypt.salt");
    key->hash = data::from_hex(s.value("hash", ""), at + ": scrypt.hash");
    MYRIAD_CHECK(key->salt.size() >= 16 && key->hash.size() == 32,
                 at << ": scrypt.salt must hold >= 16 bytes and scrypt.hash 32");
    table->keys[id] = std::move(key);
  }
}

std::shared_ptr<const AccessPolicy::Table> AccessPolicy::table() const {
  std::lock_guard lock(mutex_);
  return table_;
}

std::vector<ApiKeyInfo> AccessPolicy::keys() const {
  std::vector<ApiKeyInfo> out;
  for (const auto& [id, key] : table()->keys) out.push_back(key->info);
  return out;
}

std::string AccessPolicy::verified_key_id(const std::string& authorization) const {
  if (authorization.rfind("Bearer ", 0) != 0) return {};
  const std::string remembered = data::hmac_sha256_hex(cache_key_, authorization.substr(7));
  std::lock_guard lock(mutex_);
  const auto seen = verified_.find(remembered);
  return seen == verified_.end() ? std::string() : seen->second;
}

bool AccessPolicy::take(Bucket& bucket, double per_second, double burst, double& wait) {
  const auto now = std::chrono::steady_clock::now();
  const double elapsed = std::chrono::duration<double>(now - bucket.last).count();
  bucket.tokens = std::min(burst, bucket.tokens + elapsed * per_second);
  bucket.last = now;
  if (bucket.tokens >= 1.0) {
    bucket.tokens -= 1.0;
    return true;
  }
  wait = (1.0 - bucket.tokens) / per_second;
  return false;
}

std::shared_ptr<const AccessPolicy::Key> AccessPolicy::authenticate(const std::string& token,
                                                                    AccessDecision& decision) {
  const std::shared_ptr<const Table> table = this->table();
  decision.status = 401;
  // myr_<id>_<secret>: the id picks the entry.
  const std::size_t split = token.rfind('_');
  if (token.rfind(kTokenPrefix, 0) != 0 || split == std::string::npos || split < 5 || split + 1 >= token.size()) {
    decision.message = "the API key is malformed (expected myr_<id>_<secret>)";
    return nullptr;
  }
  const std::string id = token.substr(4, split - 4);
  const auto it = valid_id(id) ? table->keys.find(id) : table->keys.end();
  if (it == table->keys.end()) {
    decision.message = "invalid API key";
    return nullptr;
  }
  const std::string remembered = data::hmac_sha256_hex(cache_key_, token);
  {
    std::lock_guard lock(mutex_);
    const auto seen = verified_.find(remembered);
    if (seen != verified_.end() && seen->second == id) return it->second;
    double wait = 0;  // an unverified token costs a slow hash: within the shared budget only
    if (!take(verifications_, table->verifications_per_second, table->verifications_per_second, wait)) {
      decision.status = 429;
      decision.retry_after = wait;
      decision.message = "too many API key verifications; retry later";
      return nullptr;
    }
  }
  const Key& key = *it->second;
  unsigned char derived[32];
  const bool hashed =
      EVP_PBE_scrypt(token.data(), token.size(), reinterpret_cast<const unsigned char*>(key.salt.data()),
                     key.salt.size(), key.n, key.r, key.p, 0, derived, sizeof derived) == 1;
  if (!hashed || CRYPTO_memcmp(derived, key.hash.data(), sizeof derived) != 0) {
    decision.message = "invalid API key";
    return nullptr;
  }
  std::lock_guard lock(mutex_);
  if (verified_.size() >= kMaxRemembered) verified_.clear();
  verified_[remembered] = id;
  return it->second;
}

AccessDecision AccessPolicy::decide(const std::string& method, const std::string& path,
                                    const std::string& authorization) {
  AccessDecision decision;
  const std::optional<Permission> needs = permission_for(method, path);
  if (!needs) return decision;  // not an endpoint: the router answers 404
  const std::shared_ptr<const Table> table = this->table();
  if (table->public_paths.count(path) != 0) return decision;
  constexpr const char* kBearer = "Bearer ";
  if (authorization.rfind(kBearer, 0) != 0 || authorization.size() <= 7) {
    decision.status = 401;
    decision.message = "an API key is required (Authorization: Bearer <key>)";
    return decision;
  }
  const std::shared_ptr<const Key> key = authenticate(authorization.substr(7), decision);
  if (!key) return decision;
  decision.key_id = key->info.id;
  if (key->permissions.count(*needs) == 0) {
    decision.status = 403;
    std::string roles;
    for (const std::string& role : roles_holding(*needs)) roles += (roles.empty() ? "" : ", ") + role;
    decision.message =
        "API key '" + key->info.id + "' may not " + permission_name(*needs) + " (roles with it: " + roles + ")";
    return decision;
  }
  if (key->info.per_second > 0) {
    std::lock_guard lock(mutex_);
    auto [bucket, fresh] = limits_.try_emplace(key->info.id);
    if (fresh) bucket->second = Bucket{key->info.burst, std::chrono::steady_clock::now()};
    double wait = 0;
    if (!take(bucket->second, key->info.per_second, key->info.burst, wait)) {
      decision.status = 429;
      decision.retry_after = wait;
      decision.message = "API key '" + key->info.id + "' is over its rate limit";
      return decision;
    }
  }
  decision.status = 200;
  return decision;
}

}  // namespace myriad::serve
