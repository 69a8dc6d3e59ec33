// Corpus sharding in one process: the same shards and manifest for 1, 2 and 4 threads and any
// batch size; plain and compressed shards hold the same tokens; the documents and tail splits
// follow their rules (checked against a direct reading of the corpus); bad input is counted in the
// manifest per source; an output folder that already holds shards is refused.
#include <gtest/gtest.h>
#include <omp.h>
#include <zstd.h>

#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "myriad/core/error.h"
#include "myriad/data/shard_corpus.h"
#include "myriad/data/token_shard.h"
#include "temp_dir.h"

namespace myriad::data {
namespace {

namespace fs = std::filesystem;
using testing::read_bytes;
using testing::TempDir;
using testing::write_bytes;

// Three sources: a text file split by "%" lines, a JSONL file with one bad line, a zstd JSONL.
std::vector<std::string> make_corpus(const TempDir& dir) {
  fs::create_directories(dir / "corpus");
  std::string text, jsonl, packed;
  for (int i = 0; i < 60; ++i) text += "fortune number " + std::to_string(i) + "\nsecond line\n%\n";
  for (int i = 0; i < 80; ++i) jsonl += "{\"text\": \"json document " + std::to_string(i * 7) + "\"}\n";
  jsonl += "{broken\n";
  for (int i = 0; i < 50; ++i) packed += "{\"text\": \"packed " + std::to_string(i) + " \\u00e9\"}\n";
  write_bytes(dir / "corpus/a.txt", text);
  write_bytes(dir / "corpus/b.jsonl", jsonl);
  std::string frame(ZSTD_compressBound(packed.size()), '\0');
  frame.resize(ZSTD_compress(frame.data(), frame.size(), packed.data(), packed.size(), 3));
  write_bytes(dir / "corpus/c.jsonl.zst", frame);
  return {dir / "corpus"};
}

ShardCorpusOptions options_for(const std::vector<std::string>& inputs, const std::string& output) {
  ShardCorpusOptions options;
  options.inputs = inputs;
  options.output_dir = output;
  options.source.separator = "%";
  options.val_fraction = 0.1;
  options.shard_tokens = 700;
  return options;
}

std::vector<std::int32_t> stream_of(const std::vector<ShardInfo>& shards) {
  std::vector<std::int32_t> out;
  for (const ShardInfo& info : shards) {
    auto reader = open_token_reader(info.path);
    std::vector<std::int32_t> ids(static_cast<std::size_t>(reader->size()));
    reader->read(0, reader->size(), ids.data());
    out.insert(out.end(), ids.begin(), ids.end());
  }
  return out;
}

void expect_same_folders(const std::string& a, const std::string& b) {
  std::vector<std::string> names;
  for (const auto& entry : fs::directory_iterator(a)) names.push_back(entry.path().filename().string());
  std::size_t count_b = 0;
  for ([[maybe_unused]] const auto& entry : fs::directory_iterator(b)) ++count_b;
  EXPECT_EQ(names.size(), count_b);
  for (const std::string& name : names) {
    EXPECT_EQ(read_bytes((fs::path(a) / name).string()), read_bytes((fs::path(b) / name).string())) << name;
  }
}

TEST(ShardCorpus, TheSameShardsForAnyThreadCountAndBatchSize) {
  TempDir dir;
  const std::vector<std::string> inputs = make_corpus(dir);
  const TextEncoding bytes = load_text_encoding("bytes");
  SoloWorkers solo;
  const int threads = omp_get_max_threads();
  std::vector<ShardCorpusSummary> runs;
  for (int t : {1, 2, 4}) {
    omp_set_num_threads(t);
    ShardCorpusOptions options = options_for(inputs, dir / ("threads" + std::to_string(t)));
    options.batch_bytes = t == 1 ? 1 << 20 : 100 * t;  // one batch per file, or many small ones
    runs.push_back(shard_corpus(options, bytes, solo));
  }
  omp_set_num_threads(threads);
  expect_same_folders(dir / "threads1", dir / "threads2");
  expect_same_folders(dir / "threads1", dir / "threads4");
  EXPECT_EQ(runs[0].train_tokens, runs[2].train_tokens);
  EXPECT_GE(runs[0].train_shards.size(), 3u);
  EXPECT_FALSE(fs::exists(dir / "threads1/.tokenize"));
}

TEST(ShardCorpus, SplitsFollowTheirRulesAndTheStreamIsTheDocuments) {
  TempDir dir;
  const std::vector<std::string> inputs = make_corpus(dir);
  const TextEncoding bytes = load_text_encoding("bytes");
  SoloWorkers solo;
  // The documents in corpus order, read directly.
  std::vector<std::string> documents;
  InputReport direct;
  SourceOptions source;
  source.separator = "%";
  for (const std::string& file : list_corpus_files(inputs, {})) {
    for_each_file_document(file, source, direct, [&](std::string_view d) { documents.emplace_back(d); });
  }
  ASSERT_EQ(documents.size(), 190u);
  std::vector<std::int32_t> want_train, want_val;
  for (std::size_t i = 0; i < documents.size(); ++i) {
    std::vector<std::int32_t>& to = is_val_document(static_cast<std::int64_t>(i), 0.1) ? want_val : want_train;
    to.push_back(256);
    for (unsigned char c : documents[i]) to.push_back(c);
  }
  const ShardCorpusSummary by_document = shard_corpus(options_for(inputs, dir / "documents"), bytes, solo);
  EXPECT_EQ(stream_of(by_document.train_shards), want_train);
  EXPECT_EQ(stream_of(by_document.val_shards), want_val);
  EXPECT_EQ(by_document.val_documents, 19);

  ShardCorpusOptions tail = options_for(inputs, dir / "tail");
  tail.val_split = ValSplit::tail;
  tail.compression = ShardCompression{.block_tokens = 128, .level = 3};
  const ShardCorpusSummary by_tail = shard_corpus(tail, bytes, solo);
  std::vector<std::int32_t> all;
  for (const std::string& document : documents) {
    all.push_back(256);
    for (unsigned char c : document) all.push_back(c);
  }
  const auto held = static_cast<std::size_t>(std::floor(0.1 * static_cast<double>(all.size())));
  EXPECT_EQ(stream_of(by_tail.train_shards), std::vector<std::int32_t>(all.begin(), all.end() - held));
  EXPECT_EQ(stream_of(by_tail.val_shards), std::vector<std::int32_t>(all.end() - held, all.end()));
  EXPECT_TRUE(is_compressed_token_shard(by_tail.train_shards[0].path));
}

TEST(ShardCorpus, TheManifestNamesSourcesProblemsAndChecksums) {
  TempDir dir;
  const std::vector<std::string> inputs = make_corpus(dir);
  SoloWorkers solo;
  const ShardCorpusSummary summary = shard_corpus(options_for(inputs, dir / "out"), load_text_encoding("bytes"), solo);
  EXPECT_EQ(summary.report.count(InputProblem::not_json), 1);
  const nlohmann::json manifest = nlohmann::json::parse(read_bytes(summary.manifest_path));
  ASSERT_EQ(manifest.at("sources").size(), 3u);
  EXPECT_EQ(manifest.at("sources")[1].at("path"), dir / "corpus/b.jsonl");
  EXPECT_EQ(manifest.at("sources")[1].at("problems").at("not_json").at("count"), 1);
  EXPECT_EQ(manifest.at("sources")[2].at("documents"), 50);
  EXPECT_EQ(manifest.at("totals").at("documents"), 190);
  const nlohmann::json& first = manifest.at("splits").at("train").at("shards")[0];
  const std::string shard = read_bytes((fs::path(dir / "out") / first.at("file").get<std::string>()).string());
  EXPECT_EQ(first.at("crc32").get<std::uint32_t>(), crc32(shard.data(), shard.size()));
  EXPECT_EQ(first.at("bytes").get<std::size_t>(), shard.size());
  EXPECT_EQ(manifest.at("tokenizer").at("vocab_size"), 257);

  try {
    shard_corpus(options_for(inputs, dir / "out"), load_text_encoding("bytes"), solo);
    ADD_FAILURE() << "a folder with shards was overwritten";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("already holds token shards"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace myriad::data
