// bench_tokenizer: GPT-2 BPE encode throughput (MB/s of UTF-8 input) on tinyshakespeare, on one
// thread and on all OpenMP threads. The multi-threaded run cuts the text into chunks at safe
// line boundaries (data::next_safe_split: the pieces, hence the ids, are unchanged) and encodes
// the chunks in parallel; before timing, it checks that the chunked ids equal the single-call
// ids and that they decode back to the text. Baselines measured in the same run: the
// pre-tokeniser alone (an upper bound for encode) and the one-thread encode (for the speed-up).
// Usage: OMP_NUM_THREADS=N bench_tokenizer [--quick] [--data DIR]
//   DIR holds gpt2/{encoder.json,vocab.bpe} and tinyshakespeare.txt; default $MYRIAD_SHARED_DATA,
//   else <source>/../shared/data.
#include <omp.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>

#include "harness.h"
#include "myriad/data/bpe_tokenizer.h"
#include "myriad/data/pretokenize.h"

using namespace myriad;
using namespace myriad::bench;

namespace {

std::string default_data_dir() {
  if (const char* env = std::getenv("MYRIAD_SHARED_DATA"); env != nullptr && *env != '\0') return env;
  // This file is benchmarks/bench_tokenizer.cpp under the source dir.
  return (std::filesystem::path(__FILE__).parent_path().parent_path() / ".." / "shared" / "data").string();
}

// Chunk boundaries: about `target` bytes each, cut at safe line boundaries.
std::vector<std::string_view> chunks_of(std::string_view text, std::size_t target) {
  std::vector<std::string_view> chunks;
  std::size_t begin = 0;
  while (begin < text.size()) {
    const std::size_t end = data::next_safe_split(text, std::min(text.size(), begin + target));
    chunks.push_back(text.substr(begin, end - begin));
    begin = end;
  }
  return chunks;
}

std::vector<std::int32_t> encode_chunks(const data::BpeTokenizer& tok, const std::vector<std::string_view>& chunks,
                                        int threads) {
  std::vector<std::vector<std::int32_t>> parts(chunks.size());
  const auto n = static_cast<std::int64_t>(chunks.size());
  // Each chunk writes only its own vector: the result does not depend on the schedule.
#pragma omp parallel for schedule(dynamic, 1) num_threads(threads)
  for (std::int64_t i = 0; i < n; ++i) parts[i] = tok.encode(chunks[i]);
  std::vector<std::int32_t> ids;
  for (const auto& p : parts) ids.insert(ids.end(), p.begin(), p.end());
  return ids;
}

}  // namespace

static int run(int argc, char** argv) {
  bool quick = false;
  std::string data_dir = default_data_dir();
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0)
      quick = true;
    else if (std::strcmp(argv[i], "--data") == 0 && i + 1 < argc)
      data_dir = argv[++i];
    else {
      std::cerr << "usage: bench_tokenizer [--quick] [--data DIR]\n";
      return 2;
    }
  }
  print_header("bench_tokenizer: GPT-2 byte-level BPE encode throughput", argc, argv);
  const std::string encoder = data_dir + "/gpt2/encoder.json", vocab = data_dir + "/gpt2/vocab.bpe";
  const std::string corpus = data_dir + "/tinyshakespeare.txt";
  for (const std::string& path : {encoder, vocab, corpus}) {
    if (!std::filesystem::exists(path)) {
      std::cerr << "missing " << path << " (pass --data DIR or set MYRIAD_SHARED_DATA)\n";
      return 1;
    }
  }
  try {
    const auto load_start = std::chrono::steady_clock::now();
    const data::BpeTokenizer tok = data::BpeTokenizer::load_gpt2(encoder, vocab);
    const double load_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - load_start).count();
    std::ifstream in(corpus, std::ios::binary);
    std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (quick) text.resize(data::next_safe_split(text, 256 * 1024));
    const double mb = static_cast<double>(text.size()) / 1e6;
    const int max_threads = omp_get_max_threads();
    std::cout << "- load_gpt2: " << fmt(load_s * 1e3, 1) << " ms (" << tok.vocab_size() << " tokens, "
              << tok.num_merges() << " merges)\n";

    // Correctness before timing.
    const std::vector<std::int32_t> serial = tok.encode(text);
    const std::vector<std::string_view> chunks =
        chunks_of(text, std::max<std::size_t>(16 * 1024, text.size() / (8 * max_threads)));
    const std::vector<std::int32_t> chunked = encode_chunks(tok, chunks, max_threads);
    const bool ok = chunked == serial && tok.decode(serial) == text;
    std::cout << "- text: " << corpus << ", " << bytes_human(static_cast<double>(text.size())) << ", " << serial.size()
              << " tokens (" << fmt(static_cast<double>(text.size()) / serial.size(), 2) << " bytes/token), "
              << chunks.size() << " chunks\n";
    std::cout << "- check (chunked ids == single-call ids, decode == text): " << (ok ? "ok" : "FAILED") << "\n\n";
    if (!ok) return 1;

    Table table({"case", "threads", "MB/s", "Mtokens/s", "vs 1-thread encode"});
    std::size_t pieces = 0;
    const Timing pre = time_it([&] {
      pieces = 0;
      data::pretokenize_gpt2(text, [&](std::string_view) { ++pieces; });
      do_not_optimize(&pieces);
    });
    const Timing one = time_it([&] {
      std::vector<std::int32_t> ids = tok.encode(text);
      do_not_optimize(ids.data());
    });
    const double tokens_m = static_cast<double>(serial.size()) / 1e6;
    table.add_row({"pre-tokenise only (" + std::to_string(pieces) + " pieces)", "1", fmt(mb / pre.median_s, 1), "-",
                   fmt(one.median_s / pre.median_s, 2) + "x"});
    table.add_row({"encode, one call", "1", fmt(mb / one.median_s, 1), fmt(tokens_m / one.median_s, 2), "1.00x"});
    std::vector<int> counts;
    for (int t = 2; t < max_threads; t *= 2) counts.push_back(t);
    if (max_threads > 1) counts.push_back(max_threads);
    for (int threads : counts) {
      const Timing par = time_it([&] {
        std::vector<std::int32_t> ids = encode_chunks(tok, chunks, threads);
        do_not_optimize(ids.data());
      });
      table.add_row({"encode, chunks at line boundaries", std::to_string(threads), fmt(mb / par.median_s, 1),
                     fmt(tokens_m / par.median_s, 2), fmt(one.median_s / par.median_s, 2) + "x"});
    }
    table.print();
  } catch (const std::exception& e) {
    std::cerr << "bench_tokenizer: " << e.what() << "\n";
    return 1;
  }
  return 0;
}

int main(int argc, char** argv) {
  return myriad::bench::run_reporting_errors("bench_tokenizer", [&] { return run(argc, argv); });
}
