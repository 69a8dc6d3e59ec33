// Block-compressed token shards: round trips for u16 and i32 vocabularies and every block
// boundary case; random reads equal the plain shard's; a ShardSet mixing plain and compressed
// shards gives the sampler the same batches as all-plain; every corruption (a flipped byte in a
// block, a truncated file, a bad index) is an error naming the file (and the block), never wrong
// tokens; reads from several threads at once.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <thread>
#include <vector>

#include "myriad/core/error.h"
#include "myriad/data/compressed_shard.h"
#include "myriad/data/sampler.h"
#include "myriad/data/shard_writer.h"
#include "temp_dir.h"

namespace myriad::data {
namespace {

using testing::patch_bytes;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

std::vector<std::int32_t> zipf_like(std::int64_t n, std::uint32_t vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  std::uniform_real_distribution<double> u(0.0, 1.0);
  for (auto& id : ids) id = static_cast<std::int32_t>(std::pow(u(rng), 3.0) * (vocab - 1));  // skewed, compressible
  return ids;
}

void expect_error_naming(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    for (const std::string& part : parts) EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

TEST(CompressedShard, RoundTripsEveryBlockLayout) {
  TempDir dir;
  for (std::uint32_t vocab : {50257u, 100000u}) {
    for (std::int64_t n : {0, 1, 999, 1000, 1001, 5432}) {
      SCOPED_TRACE("vocab " + std::to_string(vocab) + " n " + std::to_string(n));
      const std::vector<std::int32_t> ids = zipf_like(n, vocab, static_cast<std::uint32_t>(n + vocab));
      const std::string path = dir / "s.bin";
      write_compressed_token_shard(path, ids, vocab, {.block_tokens = 1000, .level = 3});
      auto shard = CompressedTokenShard::open(path);
      EXPECT_EQ(shard->size(), n);
      EXPECT_EQ(shard->vocab_size(), vocab);
      EXPECT_EQ(shard->block_count(), (n + 999) / 1000);
      std::vector<std::int32_t> back(static_cast<std::size_t>(n));
      shard->read(0, n, back.data());
      EXPECT_EQ(back, ids);
      auto reader = open_token_reader(path);
      EXPECT_NE(reader->format().find(vocab <= 65536 ? "u16" : "i32"), std::string::npos) << reader->format();
    }
  }
}

TEST(CompressedShard, RandomReadsEqualThePlainShardsAndTheBlocksAreCached) {
  TempDir dir;
  const std::vector<std::int32_t> ids = zipf_like(100000, 50257, 7);
  write_token_shard(dir / "plain.bin", ids, 50257);
  write_compressed_token_shard(dir / "packed.bin", ids, 50257, {.block_tokens = 4096, .level = 19});
  auto plain = open_token_reader(dir / "plain.bin");
  auto packed = CompressedTokenShard::open(dir / "packed.bin", false);
  EXPECT_LT(packed->file_bytes(), plain->file_bytes());
  std::mt19937 rng(1);
  for (int trial = 0; trial < 500; ++trial) {
    const std::int64_t count = std::uniform_int_distribution<std::int64_t>(0, 9000)(rng);
    const std::int64_t begin = std::uniform_int_distribution<std::int64_t>(0, 100000 - count)(rng);
    std::vector<std::int32_t> a(static_cast<std::size_t>(count)), b(a);
    plain->read(begin, count, a.data());
    packed->read(begin, count, b.data());
    ASSERT_EQ(a, b) << begin << " +" << count;
  }
  const std::int64_t misses = packed->blocks_decompressed();
  std::vector<std::int32_t> window(100);
  packed->read(50000, 100, window.data());
  packed->read(50000, 100, window.data());
  EXPECT_LE(packed->blocks_decompressed(), misses + 1);
  EXPECT_THROW(packed->read(99990, 11, window.data()), Error);
}

TEST(CompressedShard, ConcurrentReadersSeeTheRightTokens) {
  TempDir dir;
  const std::vector<std::int32_t> ids = zipf_like(60000, 1000, 3);
  write_compressed_token_shard(dir / "c.bin", ids, 1000, {.block_tokens = 777, .level = 1});
  auto shard = CompressedTokenShard::open(dir / "c.bin");
  std::vector<std::thread> threads;
  threads.reserve(4);
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937 rng(static_cast<std::uint32_t>(t));
      std::vector<std::int32_t> out(2000);
      for (int k = 0; k < 300; ++k) {
        const std::int64_t begin = std::uniform_int_distribution<std::int64_t>(0, 58000)(rng);
        shard->read(begin, 2000, out.data());
        for (std::int64_t i = 0; i < 2000; ++i) wrong[t] += out[i] != ids[begin + i];
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < 4; ++t) EXPECT_EQ(wrong[t], 0) << "thread " << t;
}

TEST(CompressedShard, CompressedAndPlainShardsGiveTheSamplerIdenticalBatches) {
  TempDir plain_dir, mixed_dir;
  const std::vector<std::int32_t> stream = zipf_like(30000, 50257, 11);
  ShardSequenceWriter plain(plain_dir.str(), "train", 50257, 7000);
  ShardSequenceWriter packed(mixed_dir.str(), "train", 50257, 7000, ShardCompression{.block_tokens = 1024});
  plain.append(stream);
  plain.finish();
  packed.append(stream);
  packed.finish();
  ASSERT_EQ(packed.paths().size(), 5u);
  EXPECT_TRUE(is_compressed_token_shard(packed.paths()[0]));
  // Mixed: replace two compressed shards by their plain twins.
  write_bytes(packed.paths()[1], read_bytes(plain.paths()[1]));
  write_bytes(packed.paths()[4], read_bytes(plain.paths()[4]));
  ShardSet a = ShardSet::open_split(plain_dir.str(), "train");
  ShardSet b = ShardSet::open_split(mixed_dir.str(), "train");
  ASSERT_EQ(a.size(), b.size());
  TrainSampler sa(a, 64, 5), sb(b, 64, 5);
  Tensor ia = Tensor::empty({8, 64}, DType::i32), ta = ia.clone(), ib = ia.clone(), tb = ia.clone();
  for (std::int64_t step = 0; step < 50; ++step) {
    sa.fill_batch(step, 0, 8, ia, ta);
    sb.fill_batch(step, 0, 8, ib, tb);
    for (std::int64_t i = 0; i < 8 * 64; ++i) {
      ASSERT_EQ(ia.data<std::int32_t>()[i], ib.data<std::int32_t>()[i]) << "step " << step;
      ASSERT_EQ(ta.data<std::int32_t>()[i], tb.data<std::int32_t>()[i]) << "step " << step;
    }
  }
}

TEST(CompressedShard, CorruptionIsAnErrorNamingTheFileAndBlock) {
  TempDir dir;
  const std::vector<std::int32_t> ids = zipf_like(10000, 50257, 5);
  const std::string path = dir / "c.bin";
  write_compressed_token_shard(path, ids, 50257, {.block_tokens = 1000, .level = 3});
  const std::string good = read_bytes(path);

  // A flipped byte inside block 3's frame: found by verify, and by a lazy read of that block.
  auto shard = CompressedTokenShard::open(path, false);
  std::vector<std::int32_t> out(10);
  const std::size_t third = good.size() / 2;  // some byte in the middle of the blocks
  unsigned char flip = static_cast<unsigned char>(good[third] ^ 0x5A);
  write_bytes(path, good);
  patch_bytes(path, third, &flip, 1);
  expect_error_naming([&] { CompressedTokenShard::open(path, true); }, {path, "block"});
  auto lazy = CompressedTokenShard::open(path, false);
  bool failed = false;
  for (std::int64_t b = 0; b < lazy->block_count(); ++b) {
    try {
      lazy->read(b * 1000, 10, out.data());
    } catch (const Error& e) {
      failed = true;
      EXPECT_NE(std::string(e.what()).find("block " + std::to_string(b)), std::string::npos) << e.what();
    }
  }
  EXPECT_TRUE(failed) << "no block noticed the flipped byte";

  write_bytes(path, good.substr(0, good.size() - 5));
  expect_error_naming([&] { CompressedTokenShard::open(path); }, {path, "truncated or trailing bytes"});
  write_bytes(path, good);
  const unsigned char junk = 0xEE;
  patch_bytes(path, good.size() - 3, &junk, 1);
  expect_error_naming([&] { CompressedTokenShard::open(path); }, {path, "block index checksum mismatch"});
  // A header may not make the reader allocate more than one bounded block: block_tokens above
  // kMaxBlockTokens is refused at open, and a frame whose declared size differs from the block's
  // is refused before its buffer is allocated.
  write_bytes(path, good);
  const std::uint32_t huge = static_cast<std::uint32_t>(kMaxBlockTokens + 1);
  patch_bytes(path, 20, &huge, 4);
  expect_error_naming([&] { CompressedTokenShard::open(path); }, {path, "block_tokens 16777217"});
  write_compressed_token_shard(path, std::vector<std::int32_t>(1000, 7), 50257, {.block_tokens = 1000, .level = 3});
  const std::uint32_t block_tokens = 2000;
  const std::uint64_t tokens = 2000;
  patch_bytes(path, 20, &block_tokens, 4);
  patch_bytes(path, 24, &tokens, 8);
  expect_error_naming([&] { CompressedTokenShard::open(path); }, {path, "block 0", "declares 2000, expected 4000"});
  write_bytes(path, good.substr(0, 30));
  expect_error_naming([&] { open_token_reader(path); }, {path, "short header"});
  expect_error_naming(
      [&] {
        write_compressed_token_shard(path, std::vector<std::int32_t>{5, 70000}, 50257, {});
      },
      {path, "70000", "position 1"});
}

}  // namespace
}  // namespace myriad::data
