// tokenize_corpus with a byte encoder (id = byte, eot = 256): document splitting, the val rules,
// file listing order, round trip of every document through the shards, shard sizes, identical
// output for any thread count / batch size, and the errors; plus one round trip through a
// trained BpeTokenizer.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>
#include <stdexcept>

#include "myriad/data/bpe_tokenizer.h"
#include "myriad/data/token_shard.h"
#include "myriad/data/tokenize_corpus.h"
#include "reference.h"
#include "temp_dir.h"
#include "test_helpers.h"

namespace myriad::data {
namespace {

using testing::expect_error_naming;
using testing::TempDir;

constexpr std::int32_t kEot = 256;
constexpr std::uint32_t kVocab = 257;

std::vector<std::int32_t> byte_encode(std::string_view text) {
  std::vector<std::int32_t> ids;
  for (unsigned char c : text) ids.push_back(c);
  return ids;
}

// Decodes a split's stream back into documents: [eot, doc..., eot, doc..., ...].
std::vector<std::string> decode_split(const std::string& dir, const std::string& split) {
  ShardSet set = ShardSet::open_split(dir, split);
  std::vector<std::int32_t> ids(static_cast<std::size_t>(set.size()));
  set.read(0, set.size(), ids.data());
  std::vector<std::string> documents;
  EXPECT_TRUE(!ids.empty() && ids[0] == kEot) << "the stream must start with eot";
  for (std::int32_t id : ids) {
    if (id == kEot)
      documents.emplace_back();
    else
      documents.back().push_back(static_cast<char>(id));
  }
  return documents;
}

std::vector<std::string_view> split(std::string_view text, const std::string& separator) {
  return split_documents(text, separator);
}

TEST(SplitDocuments, SeparatorLinesDelimitDocuments) {
  using V = std::vector<std::string_view>;
  EXPECT_EQ(split("a\nb\n%\nc\n%\n", "%"), (V{"a\nb\n", "c\n"}));
  EXPECT_EQ(split("%\nfirst\n%\n%\nsecond", "%"), (V{"first\n", "second"}));  // empty ones dropped
  EXPECT_EQ(split("a\r\n%\r\nb\r\n", "%"), (V{"a\r\n", "b\r\n"}));            // CRLF
  EXPECT_EQ(split("a\n%%\n % \nb\n", "%"), (V{"a\n%%\n % \nb\n"}));           // not separator lines
  EXPECT_EQ(split("x\n---\ny", "---"), (V{"x\n", "y"}));
  EXPECT_EQ(split("no separator\n%\n", ""), (V{"no separator\n%\n"}));
  EXPECT_EQ(split("", "%"), V{});
  EXPECT_EQ(split("", ""), V{});
}

TEST(ValSplit, PutsExactlyFloorNFDocumentsInValEvenlySpread) {
  for (double f : {0.0, 0.01, 0.1, 0.25, 1.0 / 3, 0.5, 0.9, 1.0}) {
    for (std::int64_t n : {1, 7, 10, 100, 1001}) {
      std::int64_t val = 0;
      for (std::int64_t i = 0; i < n; ++i) val += is_val_document(i, f);
      EXPECT_EQ(val, static_cast<std::int64_t>(std::floor(n * f))) << "f " << f << " n " << n;
    }
  }
  for (std::int64_t i = 0; i < 40; ++i) EXPECT_EQ(is_val_document(i, 0.1), i % 10 == 9) << i;
}

// A small corpus: nested folders written out of order, a hidden file, a fortune-style file.
struct Corpus {
  TempDir dir;
  std::string root() const { return dir / "corpus"; }
  Corpus() {
    testing::write_bytes(dir / "corpus/b/z.txt", "zeta\n");
    testing::write_bytes(dir / "corpus/a.txt", "alpha doc\nline two\n");
    testing::write_bytes(dir / "corpus/b/a/y.txt", "ypsilon \xc3\xa9\n");
    testing::write_bytes(dir / "corpus/b/empty.txt", "");
    testing::write_bytes(dir / "corpus/.hidden.txt", "never read\n");
    testing::write_bytes(dir / "corpus/.git/x.txt", "never read\n");
    testing::write_bytes(dir / "corpus/c.dat", "binary index\n");
  }
};

TEST(TokenizeCorpus, ListsFilesRecursivelySortedSkippingHidden) {
  Corpus corpus;
  std::string r = corpus.root();
  EXPECT_EQ(list_corpus_files({r}, {}), (std::vector<std::string>{r + "/a.txt", r + "/b/a/y.txt", r + "/b/empty.txt",
                                                                  r + "/b/z.txt", r + "/c.dat"}));
  EXPECT_EQ(
      list_corpus_files({r + "/c.dat", r}, {".txt"}),
      (std::vector<std::string>{r + "/c.dat", r + "/a.txt", r + "/b/a/y.txt", r + "/b/empty.txt", r + "/b/z.txt"}));
  expect_error_naming([&] { list_corpus_files({r + "/missing.txt"}, {}); }, {"missing.txt", "does not exist"});
}

TEST(TokenizeCorpus, RoundTripsEveryDocumentInOrder) {
  Corpus corpus;
  TokenizeOptions options;
  options.inputs = {corpus.root()};
  options.extensions = {".txt"};
  options.output_dir = corpus.dir / "out";
  TokenizeSummary summary = tokenize_corpus(options, byte_encode, kEot, kVocab);
  std::vector<std::string> expected = {"alpha doc\nline two\n", "ypsilon \xc3\xa9\n", "zeta\n"};
  EXPECT_EQ(decode_split(options.output_dir, "train"), expected);
  EXPECT_EQ(summary.files, 4);
  EXPECT_EQ(summary.documents, 3);
  EXPECT_EQ(summary.val_documents, 0);
  std::int64_t bytes = 0;
  for (const auto& d : expected) bytes += static_cast<std::int64_t>(d.size());
  EXPECT_EQ(summary.bytes, bytes);
  EXPECT_EQ(summary.train_tokens, bytes + 3);
  EXPECT_EQ(summary.val_tokens, 0);
  EXPECT_EQ(summary.train_shards, (std::vector<std::string>{options.output_dir + "/train_000000.bin"}));
  EXPECT_TRUE(summary.val_shards.empty());
  EXPECT_EQ(ShardSet::open_split(options.output_dir, "train").vocab_size(), kVocab);
}

TEST(TokenizeCorpus, SeparatorsValSplitAndShardSizes) {
  TempDir dir;
  // 3 fortune files with 10 documents each (one file ends without a final separator).
  std::vector<std::string> documents;
  for (int f = 0; f < 3; ++f) {
    std::string text;
    for (int d = 0; d < 10; ++d) {
      std::string doc = "fortune " + std::to_string(f) + "." + std::to_string(d) + "\nsecond line\n";
      documents.push_back(doc);
      text += doc + (f == 2 && d == 9 ? "" : "%\n");
    }
    testing::write_bytes(dir / ("fortunes/f" + std::to_string(f)), text);
  }
  TokenizeOptions options;
  options.inputs = {dir / "fortunes"};
  options.output_dir = dir / "out";
  options.separator = "%";
  options.val_fraction = 0.2;
  options.shard_tokens = 100;
  TokenizeSummary summary = tokenize_corpus(options, byte_encode, kEot, kVocab);
  std::vector<std::string> train, val;
  for (std::size_t i = 0; i < documents.size(); ++i)
    (is_val_document(static_cast<std::int64_t>(i), 0.2) ? val : train).push_back(documents[i]);
  ASSERT_EQ(val.size(), 6u);
  EXPECT_EQ(decode_split(options.output_dir, "train"), train);
  EXPECT_EQ(decode_split(options.output_dir, "val"), val);
  EXPECT_EQ(summary.documents, 30);
  EXPECT_EQ(summary.val_documents, 6);
  // Shards: all full but the last.
  for (const auto* shards : {&summary.train_shards, &summary.val_shards}) {
    ASSERT_GT(shards->size(), 1u);
    for (std::size_t s = 0; s < shards->size(); ++s) {
      std::int64_t size = TokenShard::open((*shards)[s]).size();
      if (s + 1 < shards->size())
        EXPECT_EQ(size, 100);
      else
        EXPECT_LE(size, 100);
    }
  }
  EXPECT_EQ(ShardSet(summary.train_shards).size(), summary.train_tokens);
  EXPECT_EQ(ShardSet(summary.val_shards).size(), summary.val_tokens);
}

// Same bytes on disk for 1 or 2 threads and for any batch size.
TEST(TokenizeCorpus, OutputIndependentOfThreadsAndBatches) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  TempDir dir;
  std::mt19937_64 rng(seed);
  for (int f = 0; f < 12; ++f) {
    std::string text;
    for (int d = 0; d < 20; ++d) {
      std::size_t length = rng() % 200;
      for (std::size_t i = 0; i < length; ++i) text.push_back(static_cast<char>('a' + rng() % 26));
      text += "\n@@\n";
    }
    testing::write_bytes(dir / ("in/" + std::to_string(f) + ".txt"), text);
  }
  testing::ThreadCountGuard guard;
  std::vector<std::string> outputs;
  const std::vector<std::pair<int, std::int64_t>> runs = {{1, 1 << 20}, {2, 1 << 20}, {2, 1}, {1, 300}};
  for (auto [threads, batch] : runs) {
    omp_set_num_threads(threads);
    TokenizeOptions options;
    options.inputs = {dir / "in"};
    options.output_dir = dir / ("out" + std::to_string(outputs.size()));
    options.separator = "@@";
    options.val_fraction = 0.15;
    options.shard_tokens = 997;
    options.batch_bytes = batch;
    TokenizeSummary summary = tokenize_corpus(options, byte_encode, kEot, kVocab);
    std::string all;
    for (const auto& p : summary.train_shards) all += testing::read_bytes(p);
    all += "|";
    for (const auto& p : summary.val_shards) all += testing::read_bytes(p);
    outputs.push_back(all);
  }
  for (std::size_t i = 1; i < outputs.size(); ++i) EXPECT_TRUE(outputs[i] == outputs[0]) << "run " << i << " differs";
}

// The real tokenizer wired in as the tool does: documents decode back exactly, split by eot.
TEST(TokenizeCorpus, RoundTripsThroughATrainedBpe) {
  Corpus corpus;
  std::vector<std::string> files = list_corpus_files({corpus.root()}, {".txt"});
  std::string text;
  std::vector<std::string> documents;
  for_each_document(files, "", [&](std::string_view d) {
    text.append(d);
    documents.emplace_back(d);
  });
  BpeTokenizer bpe = BpeTokenizer::train(text + text + "alpha alpha line line", 280);
  TokenizeOptions options;
  options.inputs = {corpus.root()};
  options.extensions = {".txt"};
  options.output_dir = corpus.dir / "bpe";
  TokenizeSummary summary = tokenize_corpus(
      options, [&](std::string_view t) { return bpe.encode(t); }, bpe.eot_id(),
      static_cast<std::uint32_t>(bpe.vocab_size()));
  ShardSet set = ShardSet::open_split(options.output_dir, "train");
  EXPECT_EQ(set.vocab_size(), static_cast<std::uint32_t>(bpe.vocab_size()));
  std::vector<std::int32_t> ids(static_cast<std::size_t>(set.size()));
  set.read(0, set.size(), ids.data());
  EXPECT_LT(ids.size(), text.size());  // merges happened
  std::vector<std::string> decoded;
  std::vector<std::int32_t> current;
  for (std::size_t i = 0; i <= ids.size(); ++i) {
    if (i == ids.size() || ids[i] == bpe.eot_id()) {
      if (i > 0) decoded.push_back(bpe.decode(current));
      current.clear();
    } else {
      current.push_back(ids[i]);
    }
  }
  EXPECT_EQ(decoded, documents);
  EXPECT_EQ(summary.documents, 3);
}

std::vector<std::int32_t> read_stream(const std::vector<std::string>& paths) {
  std::vector<std::int32_t> ids;
  for (const std::string& path : paths) {
    TokenShard shard = TokenShard::open(path);
    std::size_t at = ids.size();
    ids.resize(at + static_cast<std::size_t>(shard.size()));
    shard.read(0, shard.size(), ids.data() + at);
  }
  return ids;
}

// ValSplit::tail: val is exactly the last floor(f * N) tokens of the full stream, train the rest,
// for cuts inside a shard, on a shard boundary, and f = 1.
TEST(TokenizeCorpus, TailSplitMovesTheLastTokensToVal) {
  TempDir dir;
  testing::write_bytes(dir / "one.txt", std::string(1000, 'a') + "tail end");
  TokenizeOptions options;
  options.inputs = {dir / "one.txt"};
  options.output_dir = dir / "full";
  std::vector<std::int32_t> full = read_stream(tokenize_corpus(options, byte_encode, kEot, kVocab).train_shards);
  const auto n = static_cast<std::int64_t>(full.size());
  ASSERT_EQ(n, 1009);
  options.val_split = ValSplit::tail;
  int run = 0;
  for (auto [f, shard_tokens] : std::vector<std::pair<double, std::int64_t>>{
           {0.25, 100}, {0.25, 7}, {0.25, 757}, {0.25, 2000}, {0.25, 757 / 2}, {1.0, 64}, {0.0, 100}}) {
    SCOPED_TRACE("f " + std::to_string(f) + " shard_tokens " + std::to_string(shard_tokens));
    options.val_fraction = f;
    options.shard_tokens = shard_tokens;
    options.output_dir = dir / ("tail" + std::to_string(run++));
    TokenizeSummary summary = tokenize_corpus(options, byte_encode, kEot, kVocab);
    const auto val_n = static_cast<std::int64_t>(std::floor(f * static_cast<double>(n)));
    std::vector<std::int32_t> train = read_stream(summary.train_shards), val = read_stream(summary.val_shards);
    EXPECT_EQ(std::vector<std::int32_t>(full.begin(), full.end() - val_n), train);
    EXPECT_EQ(std::vector<std::int32_t>(full.end() - val_n, full.end()), val);
    EXPECT_EQ(summary.train_tokens, n - val_n);
    EXPECT_EQ(summary.val_tokens, val_n);
    for (const auto* shards : {&summary.train_shards, &summary.val_shards})
      for (std::size_t s = 0; s < shards->size(); ++s) {
        std::int64_t size = TokenShard::open((*shards)[s]).size();
        EXPECT_TRUE(s + 1 < shards->size() ? size == shard_tokens : size > 0 && size <= shard_tokens) << (*shards)[s];
      }
    // Nothing left over on disk: exactly the reported shards.
    std::size_t files = 0;
    for (const auto& entry : std::filesystem::directory_iterator(options.output_dir)) files += entry.is_regular_file();
    EXPECT_EQ(files, summary.train_shards.size() + summary.val_shards.size());
  }
  EXPECT_EQ(parse_val_split("tail"), ValSplit::tail);
  expect_error_naming([] { parse_val_split("last"); }, {"'last'", "documents, tail"});
}

TEST(TokenizeCorpus, Errors) {
  Corpus corpus;
  TokenizeOptions options;
  options.inputs = {corpus.root()};
  options.output_dir = corpus.dir / "out";
  options.val_fraction = 1.5;
  expect_error_naming([&] { tokenize_corpus(options, byte_encode, kEot, kVocab); }, {"val_fraction 1.5"});
  options.val_fraction = 0;
  expect_error_naming([&] { tokenize_corpus(options, byte_encode, 300, kVocab); }, {"eot id 300", "[0, 257)"});
  // An encoder failure names the document and its file.
  auto failing = [](std::string_view text) -> std::vector<std::int32_t> {
    if (text.starts_with("zeta")) throw std::runtime_error("cannot encode zeta");
    return byte_encode(text);
  };
  expect_error_naming([&] { tokenize_corpus(options, failing, kEot, kVocab); },
                      {"encoding document 2", "z.txt", "cannot encode zeta"});
  // Ids outside the vocabulary are caught by the shard writer.
  expect_error_naming([&] { tokenize_corpus(options, byte_encode, 100, 101); }, {"out of range for vocab_size 101"});
  // Existing shards in the output directory are never mixed with new ones.
  std::filesystem::remove_all(options.output_dir);
  tokenize_corpus(options, byte_encode, kEot, kVocab);
  expect_error_naming([&] { tokenize_corpus(options, byte_encode, kEot, kVocab); },
                      {"already holds token shards", "train_000000.bin"});
  options.inputs = {corpus.dir / "nothing"};
  expect_error_naming([&] { tokenize_corpus(options, byte_encode, kEot, kVocab); }, {"nothing", "does not exist"});
}

}  // namespace
}  // namespace myriad::data
