// AccessPolicy against its specification: the role x endpoint matrix (every cell, from a table
// written here, not read from the code), 401 for no / malformed / unknown / wrong keys, public
// paths, per-key rate limits with Retry-After, the verification budget for unverified keys, a
// reload that revokes a remembered key, and bad key files refused naming the entry. Keys are
// hashed here with OpenSSL's scrypt, as `myriad serve keys` does (tests/python checks that pair).
#include "myriad/serve/access_policy.h"

#include <gtest/gtest.h>
#include <openssl/evp.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>

#include "myriad/data/digests.h"  // to_hex, as the key files hold them
#include "myriad/core/error.h"

namespace myriad::serve {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// A key entry for `token` (scrypt n 1024: quick in tests; the tool uses 16384).
json entry(const std::string& id, const std::string& token, std::vector<std::string> roles) {
  const unsigned char salt[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  unsigned char hash[32];
  EXPECT_EQ(EVP_PBE_scrypt(token.data(), token.size(), salt, sizeof salt, 1024, 8, 1, 0, hash, sizeof hash), 1);
  return {{"id", id},
          {"roles", roles},
          {"scrypt",
           {{"n", 1024}, {"r", 8}, {"p", 1}, {"salt", data::to_hex(salt, 16)}, {"hash", data::to_hex(hash, 32)}}}};
}

std::string token(const std::string& id) {
  return "myr_" + id + "_" + std::string(64, static_cast<char>('a' + id.size() % 6));
}

class AccessPolicyTest : public ::testing::Test {
 protected:
  fs::path file_ =
      fs::temp_directory_path() / ("myriad_keys_" + std::to_string(::testing::UnitTest::GetInstance()->random_seed()) +
                                   "_" + ::testing::UnitTest::GetInstance()->current_test_info()->name() + ".json");
  void write(const json& doc) { std::ofstream(file_) << doc.dump(); }
  void TearDown() override { fs::remove(file_); }
  json keys(json list, json extra = json::object()) {
    json doc = {{"format", "myriad-serve-keys-v1"}, {"public", json::array()}, {"keys", list}};
    doc.update(extra);
    return doc;
  }
};

struct Endpoint {
  const char* method;
  const char* path;
};

TEST_F(AccessPolicyTest, EveryRoleGetsExactlyItsEndpoints) {
  const std::vector<Endpoint> endpoints = {
      {"GET", "/health"},          {"GET", "/ready"},        {"GET", "/metrics"},    {"GET", "/v1/models"},
      {"POST", "/v1/completions"}, {"POST", "/admin/drain"}, {"GET", "/admin/keys"}, {"POST", "/admin/keys/reload"}};
  // The specification (docs/security.md): which endpoints each role may call, in the order above.
  const std::map<std::string, std::vector<bool>> allowed = {
      {"viewer", {true, true, true, false, false, false, false, false}},
      {"user", {true, true, false, true, true, false, false, false}},
      {"operator", {true, true, true, false, false, true, false, false}},
      {"admin", {true, true, true, true, true, true, true, true}},
  };
  json list = json::array();
  for (const auto& [role, cells] : allowed) list.push_back(entry(role + "-key", token(role + "-key"), {role}));
  write(keys(list));
  AccessPolicy policy(file_.string());
  for (const auto& [role, cells] : allowed) {
    for (std::size_t e = 0; e < endpoints.size(); ++e) {
      const AccessDecision d = policy.decide(endpoints[e].method, endpoints[e].path, "Bearer " + token(role + "-key"));
      EXPECT_EQ(d.status, cells[e] ? 200 : 403)
          << role << " " << endpoints[e].method << " " << endpoints[e].path << ": " << d.message;
      if (!cells[e]) {
        EXPECT_NE(d.message.find(role + "-key"), std::string::npos) << d.message;
        EXPECT_EQ(d.message.find(token(role + "-key")), std::string::npos) << "the token in a message";
      }
      // Without a key, every endpoint is 401 (nothing is public in this file).
      EXPECT_EQ(policy.decide(endpoints[e].method, endpoints[e].path, "").status, 401) << endpoints[e].path;
    }
  }
  // A key with two roles holds the union.
  list.push_back(entry("both", token("both"), {"viewer", "user"}));
  write(keys(list));
  policy.reload();
  EXPECT_EQ(policy.decide("GET", "/metrics", "Bearer " + token("both")).status, 200);
  EXPECT_EQ(policy.decide("POST", "/v1/completions", "Bearer " + token("both")).status, 200);
  EXPECT_EQ(policy.decide("POST", "/admin/drain", "Bearer " + token("both")).status, 403);
  // A path the server does not serve is left to the router (404), key or not.
  EXPECT_EQ(policy.decide("GET", "/nowhere", "").status, 200);
}

TEST_F(AccessPolicyTest, BadKeysAre401AndPublicPathsNeedNone) {
  write(keys(json::array({entry("alice", token("alice"), {"user"})}), {{"public", {"/health", "/metrics"}}}));
  AccessPolicy policy(file_.string());
  const std::string good = token("alice");
  std::string wrong = good;
  wrong.back() = wrong.back() == 'b' ? 'c' : 'b';
  for (const std::string& header :
       {std::string(), std::string("Basic abc"), std::string("Bearer "), std::string("Bearer sk-123"),
        std::string("Bearer myr_bob_") + std::string(64, 'a'), "Bearer " + wrong, std::string("Bearer myr_alice")}) {
    const AccessDecision d = policy.decide("POST", "/v1/completions", header);
    EXPECT_EQ(d.status, 401) << "'" << header << "': " << d.message;
    EXPECT_EQ(d.message.find(good.substr(11)), std::string::npos);
  }
  EXPECT_EQ(policy.decide("POST", "/v1/completions", "Bearer " + good).status, 200);
  EXPECT_EQ(policy.decide("GET", "/health", "").status, 200);
  EXPECT_EQ(policy.decide("GET", "/metrics", "").status, 200);
  EXPECT_EQ(policy.decide("GET", "/ready", "").status, 401);  // not public in this file
}

TEST_F(AccessPolicyTest, RateLimitsAndTheVerificationBudget) {
  json limited = entry("bot", token("bot"), {"user"});
  limited["rate_limit"] = {{"per_second", 0.5}, {"burst", 2}};
  write(keys(json::array({limited, entry("ana", token("ana"), {"user"})}), {{"max_verifications_per_second", 1}}));
  AccessPolicy policy(file_.string());
  const std::string bot = "Bearer " + token("bot");
  EXPECT_EQ(policy.decide("POST", "/v1/completions", bot).status, 200);
  EXPECT_EQ(policy.decide("POST", "/v1/completions", bot).status, 200);  // the burst of 2
  const AccessDecision over = policy.decide("POST", "/v1/completions", bot);
  EXPECT_EQ(over.status, 429) << over.message;
  EXPECT_GT(over.retry_after, 0.5);
  EXPECT_LE(over.retry_after, 2.0);
  // Another key is not limited by bot's bucket; but its first (unverified) use spends the
  // verification budget (1 per second), which bot's verification already spent.
  const AccessDecision budget = policy.decide("POST", "/v1/completions", "Bearer " + token("ana"));
  EXPECT_EQ(budget.status, 429) << budget.message;
  EXPECT_NE(budget.message.find("verifications"), std::string::npos);
}

TEST_F(AccessPolicyTest, ReloadRevokesARememberedKey) {
  write(keys(json::array({entry("ana", token("ana"), {"user"}), entry("ops", token("ops"), {"operator"})})));
  AccessPolicy policy(file_.string());
  EXPECT_EQ(policy.decide("POST", "/v1/completions", "Bearer " + token("ana")).status, 200);
  ASSERT_EQ(policy.keys().size(), 2u);
  write(keys(json::array({entry("ops", token("ops"), {"operator"})})));
  policy.reload();
  EXPECT_EQ(policy.decide("POST", "/v1/completions", "Bearer " + token("ana")).status, 401);
  ASSERT_EQ(policy.keys().size(), 1u);
  EXPECT_EQ(policy.keys()[0].id, "ops");
  // A broken file keeps the keys in force.
  std::ofstream(file_) << "{not json";
  EXPECT_THROW(policy.reload(), Error);
  EXPECT_EQ(policy.keys().size(), 1u);
}

TEST_F(AccessPolicyTest, BadFilesNameTheProblem) {
  const json good = entry("ana", token("ana"), {"user"});
  auto refused = [&](const json& doc, const std::string& needle) {
    write(doc);
    try {
      AccessPolicy policy(file_.string());
      ADD_FAILURE() << "accepted: " << doc.dump();
    } catch (const Error& e) {
      EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
      EXPECT_NE(e.message().find(file_.string()), std::string::npos) << e.message();
    }
  };
  refused(keys(json::array({good, good})), "listed twice");
  json bad_role = good;
  bad_role["roles"] = {"root"};
  refused(keys(json::array({bad_role})), "role 'root'");
  json short_salt = good;
  short_salt["scrypt"]["salt"] = "abcd";
  refused(keys(json::array({short_salt})), "scrypt.salt");
  json extra = good;
  extra["password"] = "x";
  refused(keys(json::array({extra})), "unknown field 'password'");
  refused(keys(json::array({good}), {{"admins", 1}}), "unknown field 'admins'");
  refused(keys(json::array({good}), {{"public", {"/v1/completions"}}}), "public path '/v1/completions'");
  json wrong_type = good;
  wrong_type["scrypt"]["n"] = "many";
  refused(keys(json::array({wrong_type})), "wrong type");
  refused(json{{"format", 3}, {"keys", json::array()}}, "wrong type");
  refused(json{{"format", "v0"}, {"keys", json::array()}}, "format");
  fs::remove(file_);
  EXPECT_THROW(AccessPolicy(file_.string()), Error);
}

}  // namespace
}  // namespace myriad::serve
