// Fixtures of the single-process engine tests: a fresh directory, a small structured corpus, the
// tiny GPT-2 configuration over it, and a logger that shows warnings only.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "myriad/config/run_config.h"
#include "myriad/core/logging.h"

namespace myriad::train::fixtures {

namespace fs = std::filesystem;

inline fs::path fresh_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("myriad_test_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

// A small corpus of repeated, structured sentences written to `dir`/corpus.txt.
inline std::string write_corpus(const fs::path& dir) {
  std::ofstream out(dir / "corpus.txt");
  const char* subjects[] = {"the cat", "a dog", "my friend", "the old king", "every child"};
  const char* verbs[] = {"sees", "likes", "follows", "remembers", "calls"};
  const char* objects[] = {"the moon.", "a red ball.", "the quiet river.", "its shadow.", "the baker."};
  for (int i = 0; i < 3000; ++i)
    out << subjects[i % 5] << " " << verbs[(i / 5) % 5] << " " << objects[(i / 25) % 5] << "\n";
  return (dir / "corpus.txt").string();
}

inline RunConfig tiny_config(const fs::path& dir, const std::string& corpus) {
  RunConfig c = RunConfig::from_yaml_string(R"(
model: {architecture: gpt2, vocab_size: 320, n_layer: 2, n_head: 2, n_embd: 32, context_length: 32}
training: {micro_batch: 4, gradient_accumulation: 2, seq_len: 32, steps: 20, lr: 3.0e-3, warmup_steps: 2, eval_batches: 2}
data: {tokenizer: "train:320", val_fraction: 0.1}
)",
                                            "tiny_config");
  c.data.path = corpus;
  c.logging.dir = dir.string();
  c.checkpoint.dir = (dir / "checkpoints").string();
  // No start-up peak-FLOP/s measurement (0.3 s of GEMMs per engine, the ranks sharing 2 cores):
  // MFU divides by the datasheet estimate; tests/train/metrics/test_peak_flops.cpp measures.
  c.logging.measure_peak = false;
  return c;
}

inline std::shared_ptr<spdlog::logger> quiet_logger() { return make_rank_logger(0, "warn"); }

}  // namespace myriad::train::fixtures
