// myriad-data across MPI ranks: tokenize writes the bytes one process writes (files assigned to
// ranks by size, shards written round-robin), and dedup drops the same documents and writes the
// same files, for any world size.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>

#include "mpi_test_support.h"
#include "myriad/data/dedup.h"
#include "myriad/data/shard_corpus.h"
#include "myriad/train/data/communicator_workers.h"

namespace myriad::data {
namespace {

namespace fs = std::filesystem;

std::string slurp(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

TEST(ShardCorpusMpi, EveryWorldSizeWritesTheBytesOneProcessWrites) {
  auto world = myriad::testing::make_world("data");
  const fs::path dir = fs::temp_directory_path() / "myriad_shard_corpus_mpi";
  if (world->rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir / "corpus");
    for (int f = 0; f < 7; ++f) {  // files of different sizes: the assignment is uneven
      std::ofstream out(dir / "corpus" / ("f" + std::to_string(f) + ".jsonl"));
      for (int d = 0; d < 20 + 15 * f; ++d)
        out << "{\"text\": \"file " << f << " doc " << d << " " << std::string(d % 9, 'x') << "\"}\n";
    }
  }
  world->barrier();
  ShardCorpusOptions options;
  options.inputs = {(dir / "corpus").string()};
  options.val_fraction = 0.05;
  options.shard_tokens = 1500;
  options.compression = ShardCompression{.block_tokens = 256, .level = 3};
  const TextEncoding bytes = load_text_encoding("bytes");
  options.output_dir = (dir / "parallel").string();
  train::CommunicatorWorkers workers(*world);
  const ShardCorpusSummary parallel = shard_corpus(options, bytes, workers);
  if (world->rank() == 0) {
    options.output_dir = (dir / "serial").string();
    SoloWorkers solo;
    const ShardCorpusSummary serial = shard_corpus(options, bytes, solo);
    EXPECT_EQ(parallel.train_tokens, serial.train_tokens);
    EXPECT_GE(serial.train_shards.size(), 4u);
    std::size_t files = 0;
    for (const auto& entry : fs::directory_iterator(dir / "serial")) {
      ++files;
      EXPECT_EQ(slurp(entry.path()), slurp(dir / "parallel" / entry.path().filename())) << entry.path().filename();
    }
    EXPECT_GE(files, 6u);
    fs::remove_all(dir);
  }
  world->barrier();
}

TEST(DedupMpi, EveryWorldSizeDropsWhatOneProcessDrops) {
  auto world = myriad::testing::make_world("dedup");
  const fs::path dir = fs::temp_directory_path() / "myriad_dedup_mpi";
  if (world->rank() == 0) {
    fs::remove_all(dir);
    fs::create_directories(dir / "corpus");
    for (int f = 0; f < 5; ++f) {  // documents repeated across files, exactly and with one word changed
      std::ofstream out(dir / "corpus" / ("f" + std::to_string(f) + ".jsonl"));
      for (int d = 0; d < 40 + 10 * f; ++d) {
        std::string text;
        for (int w = 0; w < 40; ++w) text += "word" + std::to_string((d % 23) * 100 + w) + " ";
        if (d % 3 == 1) text += "tail" + std::to_string(f);
        out << "{\"text\": \"" << text << "\"}\n";
      }
    }
  }
  world->barrier();
  DedupOptions options;
  options.inputs = {(dir / "corpus").string()};
  options.output_dir = (dir / "parallel").string();
  train::CommunicatorWorkers workers(*world);
  const DedupSummary parallel = dedup_corpus(options, workers);
  if (world->rank() == 0) {
    options.output_dir = (dir / "serial").string();
    SoloWorkers solo;
    const DedupSummary serial = dedup_corpus(options, solo);
    EXPECT_EQ(parallel.kept, serial.kept);
    EXPECT_EQ(parallel.exact_duplicates, serial.exact_duplicates);
    EXPECT_GT(serial.exact_duplicates, 0);
    EXPECT_GT(serial.near_duplicates, 0);
    EXPECT_EQ(serial.documents_out, 23);
    // Every output file, the removed list (dedup_removed.jsonl: labels exchanged between ranks) too.
    std::ifstream removed(serial.removed_path);
    const auto listed = std::count(std::istreambuf_iterator<char>(removed), std::istreambuf_iterator<char>(), '\n');
    EXPECT_EQ(listed, serial.exact_duplicates + serial.near_duplicates);
    for (const auto& entry : fs::directory_iterator(dir / "serial")) {
      EXPECT_EQ(slurp(entry.path()), slurp(dir / "parallel" / entry.path().filename())) << entry.path().filename();
    }
    fs::remove_all(dir);
  }
  world->barrier();
}

}  // namespace
}  // namespace myriad::data
