// Encrypted files (data/encrypted_file.h): round trips of random sizes around the chunk size;
// no plaintext in the file; every kind of damage — a flipped byte in any chunk or its tag, a
// header naming another key, chunks swapped, a chunk from another file, a file cut at or inside a
// chunk — an Error naming the file and the byte; a wrong or missing key named; rewrap under a new
// key copies the ciphertext unchanged and leaves the file readable with the new key only; files
// are mode 0600.
#include "myriad/data/encrypted_file.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "../support/reference.h"
#include "myriad/core/error.h"

namespace myriad::data {
namespace {

namespace fs = std::filesystem;

KeyRing ring(const std::string& id, std::uint64_t seed) {
  KeyRing keys;
  keys.add(id, testing::random_bytes(32, seed), true);
  return keys;
}

std::string bytes_of(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void put(const fs::path& path, const std::string& bytes) { std::ofstream(path, std::ios::binary) << bytes; }

// The error message of reading `path`, or "" when it reads.
std::string read_error(const fs::path& path, const KeyRing& keys) {
  try {
    read_encrypted_file(path.string(), keys);
    return "";
  } catch (const Error& e) {
    return e.message();
  }
}

constexpr std::size_t kChunk = 64;
constexpr std::size_t kFirstChunk = 8 + 160;  // magic + header

class EncryptedFileTest : public ::testing::Test {
 protected:
  fs::path dir_ = fs::temp_directory_path() / ("myriad_enc_" + std::to_string(testing::fresh_seed()) + "_" +
                                               ::testing::UnitTest::GetInstance()->current_test_info()->name());
  void SetUp() override { fs::create_directories(dir_); }
  void TearDown() override { fs::remove_all(dir_); }
  fs::path write(const std::string& name, const std::string& data, const KeyRing& keys) {
    const fs::path path = dir_ / name;
    EncryptedWriter writer(path.string(), keys, kChunk);
    // In uneven pieces, as a streaming caller writes.
    for (std::size_t at = 0; at < data.size();) {
      const std::size_t n = std::min<std::size_t>(data.size() - at, 1 + (at * 7) % 97);
      writer.write(data.data() + at, n);
      at += n;
    }
    writer.finish();
    return path;
  }
};

TEST_F(EncryptedFileTest, RoundTripsAnySizeWithoutPlaintextOnDisk) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const KeyRing keys = ring("k1", seed);
  for (const std::size_t n : {std::size_t{0}, std::size_t{1}, kChunk - 1, kChunk, kChunk + 1, 3 * kChunk,
                              3 * kChunk + 17, std::size_t{1000}}) {
    const std::string data = testing::random_bytes(n, seed + n);
    const fs::path path = write("f" + std::to_string(n), data, keys);
    EXPECT_TRUE(is_encrypted_file(path.string()));
    EXPECT_EQ(fs::status(path).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
    EXPECT_EQ(read_encrypted_file(path.string(), keys), data) << n << " bytes";
    // Chunks of kChunk + 16, then the final one (< kChunk bytes, possibly none) + 16.
    EXPECT_EQ(fs::file_size(path), kFirstChunk + n + 16 * (n / kChunk + 1)) << n;
    if (n >= 16) {  // no 16-byte window of the plaintext appears in the file
      const std::string stored = bytes_of(path);
      for (std::size_t at = 0; at + 16 <= n; at += 16)
        ASSERT_EQ(stored.find(data.substr(at, 16)), std::string::npos) << "plaintext at " << at;
    }
  }
  EXPECT_FALSE(is_encrypted_file((dir_ / "missing").string()));
}

TEST_F(EncryptedFileTest, DamageIsAnErrorNamingTheFileAndTheByte) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const KeyRing keys = ring("k1", seed);
  const std::string data = testing::random_bytes(3 * kChunk + 10, seed);
  const fs::path path = write("good", data, keys), other = write("other", data, keys);
  const std::string good = bytes_of(path);
  const fs::path bad = dir_ / "bad";
  auto expect_refused = [&](const std::string& bytes, const std::string& needle, const std::string& what) {
    put(bad, bytes);
    const std::string message = read_error(bad, keys);
    EXPECT_NE(message.find(bad.string()), std::string::npos) << what << ": " << message;
    EXPECT_NE(message.find(needle), std::string::npos) << what << ": " << message;
  };
  // A flipped bit anywhere in the chunks (ciphertext or tag) names that chunk's offset.
  for (std::size_t at = kFirstChunk; at < good.size(); at += 13) {
    std::string bytes = good;
    bytes[at] = static_cast<char>(bytes[at] ^ 0x20);
    const std::size_t chunk = (at - kFirstChunk) / (kChunk + 16);
    expect_refused(bytes,
                   "chunk " + std::to_string(chunk) + " at byte " + std::to_string(kFirstChunk + chunk * (kChunk + 16)),
                   "byte " + std::to_string(at));
  }
  // The wrapped key, its tag, the nonce: the data key does not unwrap, or chunk 0 fails.
  for (std::size_t at = 8 + 73; at < 8 + 141; ++at) {  // nonce, wrapped key, its IV and tag
    std::string bytes = good;
    bytes[at] = static_cast<char>(bytes[at] ^ 1);
    put(bad, bytes);
    EXPECT_NE(read_error(bad, keys), "") << "header byte " << at;
  }
  // Chunks 0 and 1 swapped; chunk 1 from another file (same key); cut at a chunk boundary; cut inside.
  std::string swapped = good;
  std::swap_ranges(swapped.begin() + kFirstChunk, swapped.begin() + kFirstChunk + kChunk + 16,
                   swapped.begin() + kFirstChunk + kChunk + 16);
  expect_refused(swapped, "chunk 0 at byte", "swapped");
  std::string mixed = good;
  const std::string foreign = bytes_of(other);
  std::copy(foreign.begin() + kFirstChunk + kChunk + 16, foreign.begin() + kFirstChunk + 2 * (kChunk + 16),
            mixed.begin() + kFirstChunk + kChunk + 16);
  expect_refused(mixed, "chunk 1 at byte", "a chunk of another file");
  expect_refused(good.substr(0, kFirstChunk + 2 * (kChunk + 16)), "truncated", "cut at a chunk boundary");
  expect_refused(good.substr(0, good.size() - 5), "fails authentication", "cut inside the final chunk");
  expect_refused(good.substr(0, 20), "not an encrypted myriad file", "cut inside the header");
}

TEST_F(EncryptedFileTest, WrongOrMissingKeysAreNamed) {
  const std::uint64_t seed = testing::fresh_seed();
  const fs::path path = write("f", testing::random_bytes(100, seed), ring("k1", seed));
  EXPECT_NE(read_error(path, ring("k2", seed)).find("key 'k1', which the key ring"), std::string::npos);
  const std::string wrong = read_error(path, ring("k1", seed + 1));
  EXPECT_NE(wrong.find("does not unwrap with key 'k1'"), std::string::npos) << wrong;
}

// A reader that refuses its file closes it: a service opening many refused files keeps its
// descriptors (the fuzzer once exhausted them this way).
TEST_F(EncryptedFileTest, RefusedOpensCloseTheirFiles) {
  const std::uint64_t seed = testing::fresh_seed();
  const fs::path path = write("f", testing::random_bytes(100, seed), ring("k1", seed));
  const fs::path damaged = dir_ / "damaged";
  std::string bytes = bytes_of(path);
  bytes[12] = static_cast<char>(bytes[12] ^ 0x40);
  put(damaged, bytes);
  const auto open_descriptors = [] {
    return std::distance(fs::directory_iterator("/proc/self/fd"), fs::directory_iterator{});
  };
  const auto before = open_descriptors();
  for (int i = 0; i < 50; ++i) {
    EXPECT_NE(read_error(path, ring("k2", seed)), "");
    EXPECT_NE(read_error(damaged, ring("k1", seed)), "");
  }
  EXPECT_EQ(open_descriptors(), before);
}

TEST_F(EncryptedFileTest, RewrapChangesOnlyTheHeader) {
  const std::uint64_t seed = testing::fresh_seed();
  KeyRing keys = ring("2026-11", seed);
  const std::string data = testing::random_bytes(5 * kChunk + 3, seed);
  const fs::path path = write("f", data, keys);
  const std::string before = bytes_of(path);
  keys.add("2026-12", testing::random_bytes(32, seed + 7), true);
  EXPECT_EQ(rewrap(path.string(), keys), "2026-11");
  const std::string after = bytes_of(path);
  EXPECT_EQ(after.substr(kFirstChunk), before.substr(kFirstChunk)) << "the ciphertext was rewritten";
  EXPECT_NE(after.substr(0, kFirstChunk), before.substr(0, kFirstChunk));
  EXPECT_EQ(EncryptedReader(path.string(), keys).kek_id(), "2026-12");
  EXPECT_EQ(fs::status(path).permissions() & fs::perms::all, fs::perms::owner_read | fs::perms::owner_write);
  EXPECT_EQ(read_encrypted_file(path.string(), keys), data);
  KeyRing only_new;
  only_new.add("2026-12", keys.key("2026-12"), true);
  EXPECT_EQ(read_encrypted_file(path.string(), only_new), data);
  EXPECT_NE(read_error(path, ring("2026-11", seed)), "");  // the old key alone no longer reads it
}

TEST_F(EncryptedFileTest, KeyFilesAreParsedStrictly) {
  const fs::path file = dir_ / "keys";
  put(file, "# keys\nkey a " + std::string(64, 'a') + "\nkey b " + std::string(64, 'b') + "\ncurrent b\n");
  const KeyRing keys = KeyRing::load(file.string());
  EXPECT_EQ(keys.current_id(), "b");
  EXPECT_EQ(keys.key("a"), std::string(32, static_cast<char>(0xaa)));
  auto refused = [&](const std::string& text, const std::string& needle) {
    put(file, text);
    try {
      KeyRing::load(file.string());
      ADD_FAILURE() << "accepted: " << text;
    } catch (const Error& e) {
      EXPECT_NE(e.message().find(needle), std::string::npos) << e.message();
    }
  };
  refused("key a " + std::string(62, 'a') + "\n", "not 64 hex digits");
  refused("key a " + std::string(64, 'a') + "\nkey b " + std::string(64, 'b') + "\n", "no 'current <id>'");
  refused("key a " + std::string(64, 'a') + "\ncurrent c\n", "current key 'c'");
  refused("key a/b " + std::string(64, 'a') + "\n", "line 1");
  refused("secret a\n", "line 1");
  refused("", "holds no key");
}

}  // namespace
}  // namespace myriad::data
