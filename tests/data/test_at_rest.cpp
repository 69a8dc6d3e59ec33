// AtRest (data/at_rest.h): random-access reads of an encrypted file equal the plaintext at any
// offset and length (within a chunk, across chunk boundaries, to the end, from an empty final
// chunk); clear files read the same way; an encrypted file without keys is an Error naming the
// file, the key id and the settings; check_key tells a wrong key from a right one; a key file
// setting that cannot be read names security.key_file or $MYRIAD_KEY_FILE.
#include "myriad/data/at_rest.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "../support/reference.h"
#include "myriad/core/error.h"

namespace myriad::data {
namespace {

namespace fs = std::filesystem;

std::string message_of(const std::function<void()>& action) {
  try {
    action();
    return "";
  } catch (const Error& e) {
    return e.message();
  }
}

class AtRestTest : public ::testing::Test {
 protected:
  fs::path dir_ = fs::temp_directory_path() / ("myriad_at_rest_" + std::to_string(testing::fresh_seed()) + "_" +
                                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  void SetUp() override { fs::create_directories(dir_); }
  void TearDown() override { fs::remove_all(dir_); }
  std::string key_file(const std::string& id, std::uint64_t seed) {
    const std::string path = (dir_ / ("keys-" + id)).string();
    std::ofstream out(path);
    out << "key " << id << " ";
    const std::string key = testing::random_bytes(32, seed);
    for (unsigned char c : key) out << "0123456789abcdef"[c >> 4] << "0123456789abcdef"[c & 15];
    out << "\n";
    return path;
  }
};

TEST_F(AtRestTest, RandomAccessReadsEqualThePlaintextClearOrEncrypted) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const AtRest encrypted = AtRest::from_key_file(key_file("k1", seed));
  ASSERT_TRUE(encrypted.encrypts());
  std::mt19937_64 draw(seed);
  // Sizes around the writer's 1 MiB chunk: an empty final chunk (exactly 2 MiB), a short one.
  for (const std::size_t n : {std::size_t{0}, std::size_t{5}, std::size_t{2} << 20, (std::size_t{2} << 20) + 4099}) {
    const std::string data = testing::random_bytes(n, seed + n);
    for (const AtRest* at_rest : {&encrypted, static_cast<const AtRest*>(nullptr)}) {
      const AtRest clear;
      const AtRest& use = at_rest != nullptr ? *at_rest : clear;
      const std::string path = (dir_ / ("f" + std::to_string(n) + (at_rest ? "e" : "c"))).string();
      use.write_all(path, data);
      EXPECT_EQ(is_encrypted_file(path), at_rest != nullptr);
      // Either kind reads with the keys; the clear one also without.
      const std::unique_ptr<StoredFileReader> reader = encrypted.open(path);
      ASSERT_EQ(reader->size(), n);
      EXPECT_EQ(encrypted.read_all(path), data);
      for (int trial = 0; trial < 40 && n > 0; ++trial) {
        const std::size_t offset = trial == 0 ? n - 1 : draw() % n;
        const std::size_t length =
            std::min<std::size_t>(n - offset, trial % 3 == 0 ? 1 + draw() % (3 << 20) : 1 + draw() % 64);
        std::string got(length, '\0');
        reader->read_at(offset, got.data(), length);
        ASSERT_EQ(got, data.substr(offset, length)) << n << " bytes, [" << offset << ", +" << length << ")";
      }
      if (n > 0) {
        char byte = 0;
        EXPECT_NE(message_of([&] { reader->read_at(n, &byte, 1); }), "");
      }
    }
  }
}

TEST_F(AtRestTest, AnEncryptedFileWithoutItsKeyIsAnErrorNamingKeyAndSetting) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const AtRest right = AtRest::from_key_file(key_file("k7", seed));
  const std::string path = (dir_ / "secret").string();
  right.write_all(path, "weights");
  const std::string without = message_of([&] { AtRest().read_all(path); });
  EXPECT_NE(without.find(path), std::string::npos) << without;
  EXPECT_NE(without.find("key 'k7'"), std::string::npos) << without;
  EXPECT_NE(without.find("security.key_file"), std::string::npos) << without;
  EXPECT_NE(without.find("MYRIAD_KEY_FILE"), std::string::npos) << without;
  EXPECT_EQ(message_of([&] { right.check_key(path); }), "");
  EXPECT_NE(message_of([&] { AtRest().check_key(path); }), "");
  const AtRest wrong = AtRest::from_key_file(key_file("k7", seed + 1));
  EXPECT_NE(message_of([&] { wrong.check_key(path); }).find("does not unwrap with key 'k7'"), std::string::npos);
  const AtRest other = AtRest::from_key_file(key_file("k8", seed));
  EXPECT_NE(message_of([&] { other.check_key(path); }).find("does not hold"), std::string::npos);
  EXPECT_EQ(message_of([&] { wrong.check_key((dir_ / "missing").string()); }), "");  // nothing to check
}

TEST_F(AtRestTest, AnUnreadableKeyFileNamesItsSetting) {
  const std::string missing = (dir_ / "no-such-keys").string();
  const std::string configured = message_of([&] { AtRest::from_key_file(missing); });
  EXPECT_EQ(configured.rfind("security.key_file: ", 0), 0u) << configured;
  EXPECT_NE(configured.find(missing), std::string::npos);
  const char* saved = std::getenv(kKeyFileVariable);
  const std::string restore = saved ? saved : "";
  ::setenv(kKeyFileVariable, missing.c_str(), 1);
  const std::string from_env = message_of([&] { AtRest::from_key_file(""); });
  EXPECT_EQ(from_env.rfind("$MYRIAD_KEY_FILE: ", 0), 0u) << from_env;
  ::unsetenv(kKeyFileVariable);
  EXPECT_FALSE(AtRest::from_key_file("").encrypts());
  if (saved != nullptr) ::setenv(kKeyFileVariable, restore.c_str(), 1);
}

}  // namespace
}  // namespace myriad::data
