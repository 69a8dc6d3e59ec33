// Encrypted token shards (data/at_rest.h around either shard format): the file holds no run of
// the tokens' bytes in clear; random reads equal the clear shard's from any number of threads; a
// ShardSet mixing encrypted and clear shards gives the sampler the batches of an all-clear set;
// without the key, or with a wrong one, opening is an error naming the file and the key; a
// modified byte is an error naming the file and offset, never wrong tokens; the corpus sharder
// (myriad-data tokenize) writes the same tokens encrypted and its temporary token files are
// encrypted while they exist.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "../support/reference.h"
#include "../support/test_helpers.h"
#include "myriad/core/error.h"
#include "myriad/data/at_rest.h"
#include "myriad/data/sampler.h"
#include "myriad/data/shard_corpus.h"
#include "myriad/data/shard_writer.h"
#include "myriad/data/worker_group.h"
#include "temp_dir.h"

namespace myriad::data {
namespace {

namespace fs = std::filesystem;
using testing::patch_bytes;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

AtRest keys(const std::string& id, std::uint64_t seed) {
  KeyRing ring;
  ring.add(id, testing::random_bytes(32, seed), true);
  return AtRest(std::move(ring));
}

std::vector<std::int32_t> random_ids(std::int64_t n, std::uint32_t vocab, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<std::int32_t> id(0, static_cast<std::int32_t>(vocab) - 1);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(n));
  for (auto& x : ids) x = id(rng);
  return ids;
}

// Writes `ids` both ways (plain or compressed) and returns the (clear, encrypted) paths.
std::pair<std::string, std::string> write_both(const TempDir& dir, const std::string& name,
                                               const std::vector<std::int32_t>& ids, std::uint32_t vocab,
                                               bool compressed, const AtRest& at_rest) {
  const std::string clear = dir / (name + "_clear.bin"), sealed = dir / (name + "_sealed.bin");
  const ShardCompression compression{.block_tokens = 4096, .level = 3};
  if (compressed) {
    write_compressed_token_shard(clear, ids, vocab, compression);
    write_compressed_token_shard(sealed, ids, vocab, compression, at_rest);
  } else {
    write_token_shard(clear, ids, vocab);
    write_token_shard(sealed, ids, vocab, at_rest);
  }
  return {clear, sealed};
}

class EncryptedShard : public ::testing::TestWithParam<bool> {};  // param: block-compressed inside

TEST_P(EncryptedShard, RandomReadsEqualTheClearShardAndNoTokenBytesAreInClear) {
  const bool compressed = GetParam();
  TempDir dir;
  const std::uint64_t seed = testing::fresh_seed();
  const AtRest at_rest = keys("k1", seed);
  for (const std::uint32_t vocab : {50257u, 100000u}) {  // u16 and i32 ids
    const std::vector<std::int32_t> ids = random_ids(150'001, vocab, static_cast<std::uint32_t>(seed));
    const auto [clear_path, sealed_path] =
        write_both(dir, "v" + std::to_string(vocab), ids, vocab, compressed, at_rest);
    EXPECT_TRUE(is_encrypted_file(sealed_path));
    // A run of 32 tokens, as stored in a clear shard, appears in the clear file but not the encrypted one.
    const std::string clear_bytes = read_bytes(clear_path);
    const std::string probe = clear_bytes.substr(clear_bytes.size() / 2, 64);
    EXPECT_NE(clear_bytes.find(probe), std::string::npos);
    EXPECT_EQ(read_bytes(sealed_path).find(probe), std::string::npos);

    const auto clear = open_token_reader(clear_path, true);
    const auto sealed = open_token_reader(sealed_path, true, at_rest);
    EXPECT_TRUE(sealed->encrypted());
    EXPECT_FALSE(clear->encrypted());
    EXPECT_EQ(sealed->format(), clear->format());
    EXPECT_EQ(sealed->size(), clear->size());
    EXPECT_EQ(sealed->file_bytes(), clear->file_bytes());
    EXPECT_EQ(sealed->vocab_size(), vocab);
    EXPECT_EQ(is_compressed_token_shard(sealed_path, at_rest), compressed);
    std::mt19937_64 rng(seed);
    for (int trial = 0; trial < 200; ++trial) {
      const std::int64_t count = static_cast<std::int64_t>(rng() % 70'000);
      const std::int64_t begin =
          static_cast<std::int64_t>(rng() % static_cast<std::uint64_t>(sealed->size() - count + 1));
      std::vector<std::int32_t> got(static_cast<std::size_t>(count));
      sealed->read(begin, count, got.data());
      ASSERT_TRUE(std::equal(got.begin(), got.end(), ids.begin() + begin)) << "begin " << begin << " count " << count;
    }
  }
}

TEST_P(EncryptedShard, ConcurrentReadersSeeTheRightTokens) {
  TempDir dir;
  const std::uint64_t seed = testing::fresh_seed();
  const AtRest at_rest = keys("k1", seed);
  const std::vector<std::int32_t> ids = random_ids(300'000, 50257, static_cast<std::uint32_t>(seed));
  const auto sealed = open_token_reader(write_both(dir, "s", ids, 50257, GetParam(), at_rest).second, false, at_rest);
  std::vector<std::thread> threads;
  std::vector<int> wrong(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      std::mt19937_64 rng(seed + static_cast<std::uint64_t>(t));
      std::vector<std::int32_t> got(1025);
      for (int i = 0; i < 300; ++i) {
        const auto begin = static_cast<std::int64_t>(rng() % (ids.size() - got.size()));
        sealed->read(begin, static_cast<std::int64_t>(got.size()), got.data());
        if (!std::equal(got.begin(), got.end(), ids.begin() + begin)) ++wrong[static_cast<std::size_t>(t)];
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong, std::vector<int>(4, 0));
}

TEST_P(EncryptedShard, WithoutTheKeyOrWithAnotherOneOpeningNamesTheFileAndTheKey) {
  TempDir dir;
  const std::uint64_t seed = testing::fresh_seed();
  const std::vector<std::int32_t> ids = random_ids(10'000, 1000, static_cast<std::uint32_t>(seed));
  const std::string sealed = write_both(dir, "s", ids, 1000, GetParam(), keys("k1", seed)).second;
  testing::expect_error_naming([&] { open_token_reader(sealed); }, {sealed, "'k1'", kKeyFileVariable});
  testing::expect_error_naming([&] { open_token_reader(sealed, true, keys("k1", seed + 1)); }, {sealed, "'k1'"});
  testing::expect_error_naming([&] { ShardSet({sealed}, true, keys("k2", seed)); }, {sealed, "'k1'"});
}

TEST_P(EncryptedShard, AModifiedByteIsAnErrorNamingTheFileAndOffset) {
  TempDir dir;
  const std::uint64_t seed = testing::fresh_seed();
  const AtRest at_rest = keys("k1", seed);
  const std::vector<std::int32_t> ids = random_ids(200'000, 50257, static_cast<std::uint32_t>(seed));
  const std::string sealed = write_both(dir, "s", ids, 50257, GetParam(), at_rest).second;
  const std::string original = read_bytes(sealed);
  const std::size_t at = original.size() / 2;
  const char flipped = static_cast<char>(original[at] ^ 0x40);
  patch_bytes(sealed, at, &flipped, 1);
  // Verified opening reads every byte: the damaged chunk is found.
  // The file's 168-byte preamble, then sealed chunks of kShardChunkBytes + a 16-byte tag.
  const std::size_t chunk_start = 168 + (at - 168) / (kShardChunkBytes + 16) * (kShardChunkBytes + 16);
  testing::expect_error_naming([&] { open_token_reader(sealed, true, at_rest); },
                               {sealed, "at byte " + std::to_string(chunk_start)});
  // Unverified: every read of the damaged chunk fails; no read returns other tokens than written.
  const auto reader = open_token_reader(sealed, false, at_rest);
  int failures = 0;
  std::vector<std::int32_t> got(4096);
  for (std::int64_t begin = 0; begin + 4096 <= reader->size(); begin += 4096) {
    try {
      reader->read(begin, 4096, got.data());
      ASSERT_TRUE(std::equal(got.begin(), got.end(), ids.begin() + begin)) << begin;
    } catch (const Error& e) {
      ++failures;
      EXPECT_NE(std::string(e.what()).find(sealed), std::string::npos) << e.what();
    }
  }
  EXPECT_GE(failures, 1);
}

INSTANTIATE_TEST_SUITE_P(PlainAndCompressed, EncryptedShard, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "compressed" : "plain";
                         });

TEST(EncryptedShardSet, MixedWithClearShardsTheSamplerDrawsTheBatchesOfAnAllClearSet) {
  TempDir dir;
  const std::uint64_t seed = testing::fresh_seed();
  const AtRest at_rest = keys("k1", seed);
  std::vector<std::string> clear, mixed;
  for (int k = 0; k < 3; ++k) {
    const std::vector<std::int32_t> ids = random_ids(20'000 + 977 * k, 50257, static_cast<std::uint32_t>(seed) + k);
    const auto [c, s] = write_both(dir, "part" + std::to_string(k), ids, 50257, k == 1, at_rest);
    clear.push_back(c);
    mixed.push_back(k == 1 ? c : s);  // encrypted plain, clear compressed, encrypted plain
  }
  const ShardSet all_clear(clear), some_sealed(mixed, true, at_rest);
  ASSERT_EQ(all_clear.size(), some_sealed.size());
  TrainSampler sa(all_clear, 64, seed), sb(some_sealed, 64, seed);
  Tensor ia = Tensor::empty({8, 64}, DType::i32), ta = ia.clone(), ib = ia.clone(), tb = ia.clone();
  for (std::int64_t step = 0; step < 30; ++step) {
    sa.fill_batch(step, 0, 8, ia, ta);
    sb.fill_batch(step, 0, 8, ib, tb);
    for (std::int64_t i = 0; i < 8 * 64; ++i) {
      ASSERT_EQ(ia.data<std::int32_t>()[i], ib.data<std::int32_t>()[i]) << "step " << step;
      ASSERT_EQ(ta.data<std::int32_t>()[i], tb.data<std::int32_t>()[i]) << "step " << step;
    }
  }
}

TEST(EncryptedShardCorpus, TokenizesTheSameTokensEncryptedAndItsTemporaryFilesAreEncrypted) {
  TempDir dir;
  const std::uint64_t seed = testing::fresh_seed();
  const AtRest at_rest = keys("k1", seed);
  fs::create_directories(dir / "corpus");
  std::string text;
  for (int i = 0; i < 300; ++i) text += "document number " + std::to_string(i * 31) + " of the corpus\n%\n";
  write_bytes(dir / "corpus/a.txt", text);
  write_bytes(dir / "corpus/b.txt", text.substr(text.size() / 3));
  const TextEncoding bytes = load_text_encoding("bytes");
  SoloWorkers solo;
  auto options_for = [&](const std::string& out) {
    ShardCorpusOptions options;
    options.inputs = {dir / "corpus"};
    options.output_dir = out;
    options.source.separator = "%";
    options.val_fraction = 0.1;
    options.shard_tokens = 3000;
    options.batch_bytes = 512;  // many batches: progress runs while the temporary files exist
    return options;
  };
  const ShardCorpusSummary clear = shard_corpus(options_for(dir / "clear"), bytes, solo);
  ShardCorpusOptions sealed_options = options_for(dir / "sealed");
  sealed_options.at_rest = at_rest;
  int temporary_files = 0, clear_temporary_files = 0;
  sealed_options.progress = [&](std::int64_t, std::int64_t) {
    for (const fs::directory_entry& entry : fs::directory_iterator(dir / "sealed/.tokenize")) {
      ++temporary_files;
      if (fs::file_size(entry.path()) > 0 && !is_encrypted_file(entry.path().string())) ++clear_temporary_files;
    }
  };
  const ShardCorpusSummary sealed = shard_corpus(sealed_options, bytes, solo);
  EXPECT_GT(temporary_files, 0);
  EXPECT_EQ(clear_temporary_files, 0);
  ASSERT_EQ(sealed.train_shards.size(), clear.train_shards.size());
  ASSERT_GT(sealed.train_shards.size(), 1u);
  for (const auto& [a, b] :
       {std::pair{&clear.train_shards, &sealed.train_shards}, std::pair{&clear.val_shards, &sealed.val_shards}}) {
    ASSERT_EQ(a->size(), b->size());
    for (std::size_t k = 0; k < a->size(); ++k) {
      EXPECT_TRUE(is_encrypted_file((*b)[k].path));
      const auto x = open_token_reader((*a)[k].path), y = open_token_reader((*b)[k].path, true, at_rest);
      std::vector<std::int32_t> xs(static_cast<std::size_t>(x->size())), ys(static_cast<std::size_t>(y->size()));
      x->read(0, x->size(), xs.data());
      y->read(0, y->size(), ys.data());
      EXPECT_EQ(xs, ys) << (*b)[k].path;
    }
  }
  EXPECT_FALSE(fs::exists(dir / "sealed/.tokenize"));
}

}  // namespace
}  // namespace myriad::data
