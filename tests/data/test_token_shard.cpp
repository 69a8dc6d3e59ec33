// Token shards: CRC-32 known answers, the pinned header layout, write/read round trips (u16 and
// i32), every error the reader reports (each naming the file and the problem), writer atomicity
// and id validation, the shard sequence writer and the concatenated ShardSet.
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <csignal>
#include <cstring>
#include <filesystem>
#include <random>

#include "myriad/data/shard_writer.h"
#include "myriad/data/token_shard.h"
#include "reference.h"
#include "temp_dir.h"
#include "test_helpers.h"

namespace myriad::data {
namespace {

using testing::expect_error_naming;
using testing::TempDir;

std::vector<std::int32_t> random_ids(std::size_t n, std::uint32_t vocab, std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::int32_t> dist(0, static_cast<std::int32_t>(vocab - 1));
  std::vector<std::int32_t> ids(n);
  for (auto& id : ids) id = dist(rng);
  return ids;
}

std::vector<std::int32_t> read_all(const TokenShard& shard) {
  std::vector<std::int32_t> out(static_cast<std::size_t>(shard.size()));
  shard.read(0, shard.size(), out.data());
  return out;
}

TEST(Crc32, MatchesKnownAnswersAndChains) {
  EXPECT_EQ(crc32("123456789", 9), 0xCBF43926u);
  EXPECT_EQ(crc32("", 0), 0u);
  const char* fox = "The quick brown fox jumps over the lazy dog";
  EXPECT_EQ(crc32(fox, std::strlen(fox)), 0x414FA339u);
  // Chained over every split point (exercises the 8-byte and the tail loops).
  for (std::size_t split = 0; split <= std::strlen(fox); ++split)
    EXPECT_EQ(crc32(fox + split, std::strlen(fox) - split, crc32(fox, split)), 0x414FA339u) << split;
}

TEST(TokenShard, HeaderLayoutIsPinned) {
  TempDir dir;
  std::string path = dir / "s.bin";
  std::vector<std::int32_t> ids = {1, 2, 300, 65535};
  write_token_shard(path, ids, 65536);
  std::string bytes = testing::read_bytes(path);
  ASSERT_EQ(bytes.size(), 64u + 4 * 2);
  EXPECT_EQ(std::memcmp(bytes.data(), "MYRTOK\0\0", 8), 0);
  auto u32 = [&](std::size_t at) {
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(static_cast<unsigned char>(bytes[at + i])) << (8 * i);
    return v;
  };
  EXPECT_EQ(u32(8), 1u);       // version
  EXPECT_EQ(u32(12), 0u);      // u16
  EXPECT_EQ(u32(16), 65536u);  // vocab_size
  EXPECT_EQ(u32(20), crc32(bytes.data() + 64, 8));
  EXPECT_EQ(u32(24), 4u);  // token count, low word
  EXPECT_EQ(u32(28), 0u);
  for (std::size_t i = 32; i < 64; ++i) EXPECT_EQ(bytes[i], 0) << i;
  // Payload: little-endian u16.
  EXPECT_EQ(static_cast<unsigned char>(bytes[64 + 4]), 300 & 0xFF);
  EXPECT_EQ(static_cast<unsigned char>(bytes[64 + 5]), 300 >> 8);
}

TEST(TokenShard, RoundTripsU16AndI32) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  TempDir dir;
  for (std::uint32_t vocab : {257u, 50257u, 65536u, 65537u, 200000u}) {
    SCOPED_TRACE("vocab " + std::to_string(vocab));
    std::vector<std::int32_t> ids = random_ids(100003, vocab, seed + vocab);
    ids[17] = static_cast<std::int32_t>(vocab - 1);  // the largest id survives the narrowing
    std::string path = dir / ("v" + std::to_string(vocab) + ".bin");
    write_token_shard(path, ids, vocab);
    EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
    TokenShard shard = TokenShard::open(path);
    EXPECT_EQ(shard.dtype(), vocab <= 65536 ? ShardDType::u16 : ShardDType::i32);
    EXPECT_EQ(shard.vocab_size(), vocab);
    EXPECT_EQ(shard.size(), static_cast<std::int64_t>(ids.size()));
    EXPECT_EQ(read_all(shard), ids);
    EXPECT_EQ(shard.token(17), static_cast<std::int32_t>(vocab - 1));
    std::vector<std::int32_t> middle(5);
    shard.read(1000, 5, middle.data());
    EXPECT_EQ(middle, std::vector<std::int32_t>(ids.begin() + 1000, ids.begin() + 1005));
    EXPECT_EQ(std::filesystem::file_size(path), 64 + ids.size() * (vocab <= 65536 ? 2 : 4));
  }
}

TEST(TokenShard, EmptyShardAndMoves) {
  TempDir dir;
  write_token_shard(dir / "empty.bin", {}, 10);
  TokenShard shard = TokenShard::open(dir / "empty.bin");
  EXPECT_EQ(shard.size(), 0);
  TokenShard moved = std::move(shard);
  EXPECT_EQ(moved.size(), 0);
  EXPECT_EQ(moved.path(), dir / "empty.bin");
  expect_error_naming([&] { moved.token(0); }, {"empty.bin", "index 0 out of range"});
  // Reading nothing into an empty vector's data() (null): was memcpy(nullptr, ..., 0), undefined
  // behaviour UBSan reports (found by tests/fuzz/fuzz_token_shard).
  write_token_shard(dir / "empty_i32.bin", {}, 100000);
  const TokenShard wide = TokenShard::open(dir / "empty_i32.bin");
  std::vector<std::int32_t> none;
  wide.read(0, 0, none.data());
  moved.read(0, 0, none.data());
}

class ShardErrors : public ::testing::Test {
 protected:
  void SetUp() override {
    std::uint64_t seed = testing::fresh_seed();
    ids_ = random_ids(4099, 1000, seed);
    path_ = dir_ / "good.bin";
    write_token_shard(path_, ids_, 1000);
  }
  TempDir dir_;
  std::string path_;
  std::vector<std::int32_t> ids_;
};

TEST_F(ShardErrors, MissingFile) {
  expect_error_naming([&] { TokenShard::open(dir_ / "nope.bin"); }, {"nope.bin", "No such file"});
}

TEST_F(ShardErrors, ShortHeader) {
  testing::write_bytes(path_, testing::read_bytes(path_).substr(0, 40));
  expect_error_naming([&] { TokenShard::open(path_); }, {path_, "short header", "40 bytes"});
  testing::write_bytes(path_, "");
  expect_error_naming([&] { TokenShard::open(path_); }, {path_, "short header", "0 bytes"});
}

TEST_F(ShardErrors, WrongMagic) {
  testing::patch_bytes(path_, 3, "X", 1);
  expect_error_naming([&] { TokenShard::open(path_); }, {path_, "wrong magic"});
}

TEST_F(ShardErrors, NewerVersion) {
  std::uint32_t version = 2;
  testing::patch_bytes(path_, 8, &version, 4);
  expect_error_naming([&] { TokenShard::open(path_); }, {path_, "format version 2", "newer"});
  version = 0;
  testing::patch_bytes(path_, 8, &version, 4);
  expect_error_naming([&] { TokenShard::open(path_); }, {path_, "invalid format version 0"});
}

TEST_F(ShardErrors, UnknownDtypeAndZeroVocab) {
  std::uint32_t dtype = 7;
  testing::patch_bytes(path_, 12, &dtype, 4);
  expect_error_naming([&] { TokenShard::open(path_); }, {path_, "unknown dtype code 7"});
  dtype = 0;
  testing::patch_bytes(path_, 12, &dtype, 4);
  std::uint32_t vocab = 0;
  testing::patch_bytes(path_, 16, &vocab, 4);
  expect_error_naming([&] { TokenShard::open(path_); }, {path_, "vocab_size is 0"});
}

TEST_F(ShardErrors, TruncatedPayload) {
  std::filesystem::resize_file(path_, 64 + 2 * ids_.size() - 2);
  expect_error_naming([&] { TokenShard::open(path_); },
                      {path_, "truncated", "4099 tokens", std::to_string(2 * ids_.size() - 2) + " payload bytes"});
  // Even with verification off, the size is always checked.
  expect_error_naming([&] { TokenShard::open(path_, false); }, {path_, "truncated"});
}

TEST_F(ShardErrors, TrailingBytes) {
  std::filesystem::resize_file(path_, 64 + 2 * ids_.size() + 1);
  expect_error_naming([&] { TokenShard::open(path_); }, {path_, "trailing bytes"});
}

TEST_F(ShardErrors, ChecksumMismatch) {
  std::string bytes = testing::read_bytes(path_);
  char flipped = static_cast<char>(bytes[64 + 1234] ^ 0x01);  // id ^ 1 stays below 1000
  testing::patch_bytes(path_, 64 + 1234, &flipped, 1);
  expect_error_naming([&] { TokenShard::open(path_); }, {path_, "checksum mismatch"});
  // verify = false skips the pass (for shards verified before).
  EXPECT_EQ(TokenShard::open(path_, false).size(), static_cast<std::int64_t>(ids_.size()));
}

TEST_F(ShardErrors, IdOutOfRange) {
  // Shrink vocab_size in the header: the payload CRC stays valid, ids >= 500 become bad.
  std::int64_t first_bad = -1;
  for (std::size_t i = 0; i < ids_.size() && first_bad < 0; ++i)
    if (ids_[i] >= 500) first_bad = static_cast<std::int64_t>(i);
  ASSERT_GE(first_bad, 0);
  std::uint32_t vocab = 500;
  testing::patch_bytes(path_, 16, &vocab, 4);
  expect_error_naming([&] { TokenShard::open(path_); }, {path_, "token id " + std::to_string(ids_[first_bad]),
                                                         "at position " + std::to_string(first_bad), "vocab_size 500"});
}

TEST(TokenShard, NegativeI32IdIsOutOfRange) {
  TempDir dir;
  std::string path = dir / "i32.bin";
  std::vector<std::int32_t> ids(200000, 5);
  write_token_shard(path, ids, 100000);  // i32 payload
  std::int32_t negative = -3;
  const std::size_t position = 150001;  // in the third 64Ki chunk
  testing::patch_bytes(path, 64 + 4 * position, &negative, 4);
  std::string bytes = testing::read_bytes(path);
  std::uint32_t crc = crc32(bytes.data() + 64, bytes.size() - 64);
  testing::patch_bytes(path, 20, &crc, 4);
  expect_error_naming([&] { TokenShard::open(path); }, {path, "token id -3", "at position 150001"});
}

TEST(ShardWriter, RejectsBadIdsBeforeWritingAnything) {
  TempDir dir;
  std::vector<std::int32_t> ids = {0, 1, 2, 10, 3};
  expect_error_naming([&] { write_token_shard(dir / "bad.bin", ids, 10); },
                      {"bad.bin", "token id 10", "at position 3", "vocab_size 10"});
  ids[3] = -1;
  expect_error_naming([&] { write_token_shard(dir / "bad.bin", ids, 10); }, {"token id -1", "at position 3"});
  EXPECT_FALSE(std::filesystem::exists(dir / "bad.bin"));
  EXPECT_FALSE(std::filesystem::exists(dir / "bad.bin.tmp"));
  expect_error_naming([&] { write_token_shard(dir / "bad.bin", ids, 0); }, {"bad.bin", "vocab_size 0"});
}

TEST(ShardWriter, MissingDirectoryLeavesNoFile) {
  TempDir dir;
  std::string path = dir / "no_such_dir/s.bin";
  expect_error_naming(
      [&] {
        write_token_shard(path, std::vector<std::int32_t>{1, 2}, 10);
      },
      {"no_such_dir/s.bin.tmp", "No such file"});
  EXPECT_FALSE(std::filesystem::exists(path));
}

// Fails the write midway (file size limit hit while writing the payload): the old shard at the
// path must survive unchanged and no .tmp file may remain.
TEST(ShardWriter, FailureMidwayKeepsTheOldShardAndRemovesTheTemp) {
  TempDir dir;
  std::string path = dir / "s.bin";
  std::vector<std::int32_t> old_ids = {7, 8, 9};
  write_token_shard(path, old_ids, 10);
  std::string old_bytes = testing::read_bytes(path);

  rlimit saved{};
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  auto old_handler = std::signal(SIGXFSZ, SIG_IGN);  // get EFBIG instead of the signal
  rlimit limited = saved;
  limited.rlim_cur = 1 << 20;  // 1 MiB; the new shard needs 64 + 4 MiB
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &limited), 0);
  std::vector<std::int32_t> ids(2 << 20, 3);
  bool threw = false;
  try {
    write_token_shard(path, ids, 10);
  } catch (const Error& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find(path + ".tmp: cannot be written"), std::string::npos) << e.what();
  }
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(threw);
  EXPECT_EQ(testing::read_bytes(path), old_bytes);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
  EXPECT_EQ(read_all(TokenShard::open(path)), old_ids);
}

TEST(ShardWriter, SequenceWriterCutsFullShards) {
  TempDir dir;
  ShardSequenceWriter writer(dir.str(), "train", 1000, 10);
  std::vector<std::int32_t> all;
  for (int piece : {3, 7, 1, 15, 0, 2}) {
    std::vector<std::int32_t> ids;
    ids.reserve(static_cast<std::size_t>(piece));
    for (int i = 0; i < piece; ++i) ids.push_back(static_cast<std::int32_t>(all.size() + ids.size()));
    writer.append(ids);
    all.insert(all.end(), ids.begin(), ids.end());
  }
  writer.finish();
  ASSERT_EQ(writer.paths().size(), 3u);  // 28 tokens: 10 + 10 + 8
  EXPECT_EQ(writer.paths()[2], dir / "train_000002.bin");
  EXPECT_EQ(writer.tokens_written(), 28);
  std::vector<std::int32_t> read_back;
  for (std::size_t i = 0; i < 3; ++i) {
    std::vector<std::int32_t> ids = read_all(TokenShard::open(writer.paths()[i]));
    EXPECT_EQ(ids.size(), i < 2 ? 10u : 8u);
    read_back.insert(read_back.end(), ids.begin(), ids.end());
  }
  EXPECT_EQ(read_back, all);
  expect_error_naming([&] { ShardSequenceWriter(dir.str(), "x", 10, 0); }, {"max_tokens must be positive"});
}

TEST(ShardSet, ConcatenatesShardsInNameOrder) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  TempDir dir;
  std::vector<std::int32_t> all = random_ids(1000, 300, seed);
  // Written out of order, with an empty shard and a val shard that must not be picked up.
  std::vector<std::pair<int, int>> pieces = {{2, 600}, {0, 0}, {1, 250}, {3, 1000}};
  int begin_of[4] = {0, 0, 250, 600};
  for (auto [index, end] : pieces) {
    std::vector<std::int32_t> part(all.begin() + begin_of[index], all.begin() + end);
    write_token_shard(shard_path(dir.str(), "train", index), part, 300);
  }
  write_token_shard(dir / "val_000000.bin", std::vector<std::int32_t>{1, 2, 3}, 300);
  write_token_shard(dir / "train_000004.bin.tmp", std::vector<std::int32_t>{1}, 300);  // ignored

  ShardSet set = ShardSet::open_split(dir.str(), "train");
  EXPECT_EQ(set.shard_count(), 4u);
  EXPECT_EQ(set.size(), 1000);
  EXPECT_EQ(set.vocab_size(), 300u);
  std::vector<std::int32_t> out(1000);
  set.read(0, 1000, out.data());
  EXPECT_EQ(out, all);
  for (std::int64_t begin : {0, 249, 250, 599, 995}) {
    std::vector<std::int32_t> window(5);
    set.read(begin, 5, window.data());
    EXPECT_EQ(window, std::vector<std::int32_t>(all.begin() + begin, all.begin() + begin + 5)) << begin;
  }
  expect_error_naming([&] { set.read(998, 3, out.data()); }, {"outside [0, 1000)", "train_000000.bin"});
  EXPECT_NE(set.describe().find("4 shards, 1000 tokens"), std::string::npos) << set.describe();
  EXPECT_EQ(ShardSet::open_split(dir.str(), "val").size(), 3);
}

TEST(ShardSet, ErrorsNameTheDirectoryOrFiles) {
  TempDir dir;
  expect_error_naming([&] { ShardSet::open_split(dir / "missing", "train"); }, {"missing", "cannot list"});
  expect_error_naming([&] { ShardSet::open_split(dir.str(), "train"); }, {dir.str(), "train_*.bin"});
  write_token_shard(dir / "train_000000.bin", std::vector<std::int32_t>{1}, 300);
  write_token_shard(dir / "train_000001.bin", std::vector<std::int32_t>{1}, 301);
  expect_error_naming([&] { ShardSet::open_split(dir.str(), "train"); },
                      {"disagree on vocab_size", "train_000000.bin", "300", "train_000001.bin", "301"});
}

}  // namespace
}  // namespace myriad::data
