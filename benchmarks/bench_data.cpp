// bench_data: the data pipeline's storage and loading costs on GPT-2 tokens of English text
// (tinyshakespeare).
//   1. Block-compressed token shards (compressed_shard.h): file bytes against the raw UTF-8 text
//      and the plain u16 shard, for block sizes x zstd levels; compression and decode speed in MB
//      of plain shard bytes per second; whole-stream zstd (one frame, no random access) as the
//      reference the blocks are measured against.
//   2. The training loader: TrainSampler batches (8 windows of 1024 + 1 tokens at random starts)
//      per second from plain and compressed shards, in clear and encrypted (AES-256-GCM, 64 KiB
//      chunks, a key made for the run; level 3: the level changes the size, hardly the
//      decode speed), with the blocks decompressed per batch. The stream is the text's tokens 32
//      times in one shard, so the shard's 8-block cache holds a small part of it, as with real
//      100M-token shards.
//   3. myriad-data's pipeline (--pipeline, also under mpirun): tokenize (GPT-2) and dedup
//      throughput in MB of text per second on a JSONL corpus of tinyshakespeare's paragraphs (each
//      copy numbered, 8 copies), per rank and thread count; MB/s per core = MB/s / (ranks x
//      threads). The tokenizer is loaded before the clock starts.
// Every compressed shard is read back and compared with the tokens before anything is timed.
// Usage: bench_data [--quick] [--data DIR] (DIR holds gpt2/ and tinyshakespeare.txt; default
// $MYRIAD_SHARED_DATA, else <source>/../shared/data);
//        mpirun -np N bench_data --pipeline [--data DIR]
#include <omp.h>
#include <unistd.h>
#include <zstd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <optional>
#include <random>

#include "harness.h"
#include "myriad/data/bpe_tokenizer.h"
#include "myriad/data/compressed_shard.h"
#include "myriad/data/dedup.h"
#include "myriad/data/shard_corpus.h"
#include "myriad/distributed/mpi_runtime.h"
#include "myriad/train/data/communicator_workers.h"
#include "myriad/data/sampler.h"
#include "myriad/data/shard_writer.h"

using namespace myriad;
using namespace myriad::bench;

namespace {

std::string jsonl_line(const std::string& text) {
  std::string out = "{\"text\": \"";
  for (char c : text) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        out += c;
    }
  }
  return out + "\"}";
}

std::string default_data_dir() {
  if (const char* env = std::getenv("MYRIAD_SHARED_DATA"); env != nullptr && *env != '\0') return env;
  return (std::filesystem::path(__FILE__).parent_path().parent_path() / ".." / "shared" / "data").string();
}

double file_size(const std::string& path) { return static_cast<double>(std::filesystem::file_size(path)); }

// Section 3: tokenize and dedup MB/s on `ranks` x OpenMP threads.
int pipeline(const std::string& data_dir, myriad::distributed::MpiRuntime& runtime, bool quick) {
  std::unique_ptr<distributed::Communicator> world = runtime.world();
  train::CommunicatorWorkers workers(*world);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() / "myriad_bench_pipeline";
  std::ifstream in(data_dir + "/tinyshakespeare.txt", std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const int copies = quick ? 2 : 8;
  if (world->rank() == 0) {
    std::filesystem::remove_all(dir);
    std::filesystem::create_directories(dir / "corpus");
    for (int copy = 0; copy < copies; ++copy) {  // one file per copy: work for every rank
      std::ofstream out(dir / "corpus" / ("part" + std::to_string(copy) + ".jsonl"));
      std::size_t begin = 0;
      for (int p = 0; begin < text.size(); ++p) {
        std::size_t end = text.find("\n\n", begin);
        end = end == std::string::npos ? text.size() : end + 2;
        out << jsonl_line(text.substr(begin, end - begin) + " (copy " + std::to_string(copy) + ")") << "\n";
        begin = end;
      }
    }
  }
  world->barrier();
  const data::TextEncoding gpt2 = data::load_text_encoding("gpt2:" + data_dir + "/gpt2");
  Table table({"stage", "ranks", "threads", "MB of text", "seconds", "MB/s", "MB/s per core"});
  for (int threads : {1, 2}) {
    omp_set_num_threads(threads);
    for (const std::string stage : {"tokenize", "dedup"}) {
      world->barrier();
      const auto start = std::chrono::steady_clock::now();
      double bytes = 0.0;
      if (stage == "tokenize") {
        data::ShardCorpusOptions options;
        options.inputs = {(dir / "corpus").string()};
        options.output_dir = (dir / ("shards" + std::to_string(threads))).string();
        options.val_fraction = 0.01;
        bytes = static_cast<double>(data::shard_corpus(options, gpt2, workers).report.document_bytes);
      } else {
        data::DedupOptions options;
        options.inputs = {(dir / "corpus").string()};
        bytes = static_cast<double>(data::dedup_corpus(options, workers).report.document_bytes);
      }
      world->barrier();
      const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
      const double rate = bytes / 1e6 / seconds;
      table.add_row({stage, std::to_string(world->size()), std::to_string(threads), fmt(bytes / 1e6, 1),
                     fmt(seconds, 2), fmt(rate, 1), fmt(rate / (world->size() * threads), 1)});
    }
  }
  if (world->rank() == 0) {
    std::cout << "## myriad-data pipeline (" << copies
              << " numbered copies of tinyshakespeare as JSONL paragraphs)\n\n";
    table.print();
    std::filesystem::remove_all(dir);
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  myriad::distributed::MpiRuntime runtime(&argc, &argv);
  bool quick = false, run_pipeline = false;
  std::string data_dir = default_data_dir();
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--data") == 0 && i + 1 < argc) {
      data_dir = argv[++i];
    } else if (std::strcmp(argv[i], "--pipeline") == 0) {
      run_pipeline = true;
    } else {
      std::cerr << "usage: bench_data [--quick] [--data DIR] [--pipeline]\n";
      return 2;
    }
  }
  if (!run_pipeline && runtime.world_size() > 1) {  // the same argv on every rank: all refuse alike
    if (runtime.world_rank() == 0) {
      std::cerr << "bench_data: under mpirun only --pipeline runs (the shard and loader tables time one process; "
                   "run them without mpirun)\n";
    }
    return 2;
  }
  if (runtime.world_rank() == 0) print_header("bench_data: block-compressed token shards and the loader", argc, argv);
  try {
    if (run_pipeline) return pipeline(data_dir, runtime, quick);
    const data::BpeTokenizer tok =
        data::BpeTokenizer::load_gpt2(data_dir + "/gpt2/encoder.json", data_dir + "/gpt2/vocab.bpe");
    std::ifstream in(data_dir + "/tinyshakespeare.txt", std::ios::binary);
    MYRIAD_CHECK(in, "--data " << data_dir << ": no tinyshakespeare.txt there (the text the tables tokenize)");
    const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    MYRIAD_CHECK(!text.empty(), "--data " << data_dir << ": tinyshakespeare.txt is empty");
    const std::vector<std::int32_t> ids = tok.encode(text);
    const auto vocab = static_cast<std::uint32_t>(tok.vocab_size());
    const std::filesystem::path dir =
        std::filesystem::temp_directory_path() / ("myriad_bench_data_" + std::to_string(::getpid()));
    std::filesystem::create_directories(dir);
    const std::string plain_path = (dir / "plain.bin").string();
    data::write_token_shard(plain_path, ids, vocab);
    const double text_bytes = static_cast<double>(text.size()), plain_bytes = file_size(plain_path);
    std::cout << "- text: tinyshakespeare.txt, " << bytes_human(text_bytes) << ", " << ids.size()
              << " GPT-2 tokens; plain u16 shard " << bytes_human(plain_bytes) << "\n";

    // Whole-stream reference: one zstd frame over the u16 ids at level 19.
    std::vector<std::uint16_t> narrow(ids.begin(), ids.end());
    std::vector<char> frame(ZSTD_compressBound(narrow.size() * 2));
    const std::size_t whole = ZSTD_compress(frame.data(), frame.size(), narrow.data(), narrow.size() * 2, 19);
    std::cout << "- whole-stream zstd level 19 (no random access): " << bytes_human(static_cast<double>(whole))
              << ", text/compressed " << fmt(text_bytes / static_cast<double>(whole), 2) << "\n\n";

    Table table({"block tokens", "zstd level", "file", "text / file", "plain / file", "vs whole stream",
                 "compress MB/s", "decode MB/s"});
    const std::vector<std::int64_t> blocks =
        quick ? std::vector<std::int64_t>{16384, 65536} : std::vector<std::int64_t>{4096, 16384, 65536, 131072, 262144};
    const std::vector<int> levels = quick ? std::vector<int>{3, 19} : std::vector<int>{3, 9, 19};
    for (std::int64_t block : blocks) {
      for (int level : levels) {
        const std::string path = (dir / ("z" + std::to_string(block) + "_" + std::to_string(level) + ".bin")).string();
        const Timing write = time_it(
            [&] {
              data::write_compressed_token_shard(path, ids, vocab, {block, level});
            },
            0, 1, 0.0);
        auto shard = data::CompressedTokenShard::open(path, true);
        std::vector<std::int32_t> back(ids.size());
        shard->read(0, shard->size(), back.data());
        if (back != ids) throw std::runtime_error("compressed shard " + path + " reads back wrong tokens");
        const Timing decode = time_it([&] {
          auto fresh = data::CompressedTokenShard::open(path, false);
          fresh->read(0, fresh->size(), back.data());
          do_not_optimize(back.data());
        });
        const double bytes = file_size(path);
        table.add_row({std::to_string(block), std::to_string(level), bytes_human(bytes), fmt(text_bytes / bytes, 2),
                       fmt(plain_bytes / bytes, 2), fmt(bytes / static_cast<double>(whole), 3) + "x",
                       fmt(plain_bytes / 1e6 / write.median_s, 1), fmt(plain_bytes / 1e6 / decode.median_s, 1)});
      }
    }
    std::cout << "## Block-compressed shards (check: every shard reads back its tokens)\n\n";
    table.print();

    std::vector<std::int32_t> stream;
    for (int copy = 0; copy < (quick ? 4 : 32); ++copy) stream.insert(stream.end(), ids.begin(), ids.end());
    std::cout << "\n## Loader: TrainSampler batches of 8 x 1024 tokens at random starts, " << stream.size()
              << " tokens in one shard\n\n";
    Table loader({"shards", "batches/s", "M tokens/s", "blocks decompressed / batch", "vs plain"});
    const std::int64_t batches = quick ? 50 : 400;
    const std::int64_t T = 1024, B = 8;
    double plain_rate = 0.0;
    // Encrypted rows read through a key ring made for this run (AES-256-GCM, 64 KiB chunks).
    data::KeyRing ring;
    std::random_device entropy;
    std::string key(32, '\0');
    for (char& c : key) c = static_cast<char>(entropy());
    ring.add("bench", key, true);
    const data::AtRest sealed(ring);
    const std::pair<std::int64_t, bool> loaders[] = {
        {0, false}, {16384, false}, {131072, false}, {0, true}, {131072, true}};
    for (const auto& [block, encrypted] : loaders) {
      const data::AtRest at_rest = encrypted ? sealed : data::AtRest();
      const std::string split_dir =
          (dir / ("loader_" + std::to_string(block) + (encrypted ? "_encrypted" : ""))).string();
      std::filesystem::create_directories(split_dir);
      std::optional<data::ShardCompression> compression;
      if (block > 0) compression = data::ShardCompression{block, 3};
      data::ShardSequenceWriter writer(split_dir, "train", vocab, static_cast<std::int64_t>(stream.size()), compression,
                                       at_rest);
      writer.append(stream);
      writer.finish();
      const data::ShardSet shards = data::ShardSet::open_split(split_dir, "train", true, at_rest);
      data::TrainSampler sampler(shards, T, 1234);
      Tensor inputs = Tensor::empty({B, T}, DType::i32), targets = inputs.clone();
      std::int64_t step = 0;
      const Timing timing = time_it([&] {
        for (std::int64_t k = 0; k < batches; ++k) sampler.fill_batch(step++, 0, B, inputs, targets);
        do_not_optimize(inputs.data<std::int32_t>());
      });
      std::int64_t decompressed = 0;
      for (std::size_t s = 0; s < shards.shard_count(); ++s) {
        if (const auto* z = dynamic_cast<const data::CompressedTokenShard*>(&shards.shard(s)))
          decompressed += z->blocks_decompressed();
      }
      const double rate = static_cast<double>(batches) / timing.median_s;
      if (block == 0 && !encrypted) plain_rate = rate;
      loader.add_row(
          {(block == 0 ? "plain u16" : "zstd blocks of " + std::to_string(block)) + (encrypted ? ", encrypted" : ""),
           fmt(rate, 0), fmt(rate * B * T / 1e6, 1),
           block == 0 ? "-" : fmt(static_cast<double>(decompressed) / static_cast<double>(step), 2),
           fmt(rate / plain_rate, 3) + "x"});
    }
    loader.print();
    std::filesystem::remove_all(dir);
  } catch (const std::exception& e) {
    std::cerr << "bench_data: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
