// Shared set-up of the engine tests that run under mpiexec: a world communicator borrowed from
// the test main's MpiRuntime, a fresh directory shared by all ranks (with a small corpus), the
// tiny model configuration, and data prepared once by rank 0.
#pragma once

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <memory>
#include <string>

#include "myriad/config/run_config.h"
#include "myriad/core/logging.h"
#include "myriad/distributed/mpi_runtime.h"
#include "myriad/distributed/scalar_reduce.h"
#include "myriad/train/data/prepared_data.h"

namespace myriad::train::testing {

namespace fs = std::filesystem;

inline constexpr int kMicroBatch = 2;

// MPI is initialised by the test main; this runtime only borrows it (and never finalises).
// Communicators are created per test and destroyed before the main finalises MPI.
struct World {
  distributed::MpiRuntime runtime;
  std::unique_ptr<distributed::Communicator> comm = runtime.world();
};

// A directory shared by all ranks (rank 0's pid names it), created fresh.
inline fs::path shared_dir(distributed::Communicator& comm, const std::string& name) {
  std::int64_t pid = comm.rank() == 0 ? ::getpid() : 0;
  pid = distributed::sum_over_ranks(comm, pid);
  fs::path dir = fs::temp_directory_path() / ("myriad_dp_" + name + "_" + std::to_string(pid));
  distributed::run_on_rank0(comm, "test directory", [&] {
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream out(dir / "corpus.txt");
    const char* subjects[] = {"the cat", "a dog", "my friend", "the old king", "every child"};
    const char* verbs[] = {"sees", "likes", "follows", "remembers", "calls"};
    const char* objects[] = {"the moon.", "a red ball.", "the quiet river.", "its shadow.", "the baker."};
    for (int i = 0; i < 3000; ++i)
      out << subjects[i % 5] << " " << verbs[(i / 5) % 5] << " " << objects[(i / 25) % 5] << "\n";
  });
  return dir;
}

inline RunConfig config_for(int rank, const fs::path& dir, const std::string& architecture, int dp, int zero_stage,
                            int accumulation) {
  RunConfig c = RunConfig::from_yaml_string(R"(
model: {vocab_size: 320, n_layer: 2, n_head: 2, n_embd: 32, context_length: 32}
training: {seq_len: 32, lr: 3.0e-3, warmup_steps: 2, eval_batches: 3, eval_every: 0}
data: {tokenizer: "train:320", val_fraction: 0.1}
)",
                                            "dp_test_config");
  c.apply_override("model.architecture=" + architecture);
  c.training.steps = 20;
  c.training.micro_batch = kMicroBatch;
  c.training.gradient_accumulation = accumulation;
  c.parallel.dp = dp;
  c.parallel.zero_stage = zero_stage;
  c.parallel.bucket_mb = 0.01;  // ~2.6k elements: several buckets even for this tiny model
  c.data.path = (dir / "corpus.txt").string();
  c.data.cache_dir = (dir / "data").string();
  c.logging.dir = (dir / ("rank" + std::to_string(rank))).string();
  c.checkpoint.dir = (dir / "checkpoints").string();
  // No start-up peak-FLOP/s measurement (0.3 s of GEMMs per engine, the ranks sharing 2 cores):
  // MFU divides by the datasheet estimate; tests/train/metrics/test_peak_flops.cpp measures.
  c.logging.measure_peak = false;
  return c;
}

// Rank 0 tokenizes once; afterwards every engine (serial or parallel) finds the cache.
inline void prepare_shared_data(distributed::Communicator& comm, const RunConfig& config) {
  distributed::run_on_rank0(comm, "data preparation", [&] {
    auto log = make_rank_logger(0, "warn");
    prepare_data(config.resolved(), *log);
  });
}

}  // namespace myriad::train::testing
