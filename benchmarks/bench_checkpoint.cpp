// bench_checkpoint: how long a checkpoint stalls training, synchronous vs asynchronous, at the
// GPT-2 124M shape (the engine's checkpoint: every parameter + AdamW m and v, f32, ZeRO 0, one
// process: one data file).
//
// The engine's path: DataParallel::snapshot_owned copies parameters and moments into a reused
// host snapshot (the first save allocates it; later ones are parallel copies), then either
// save_checkpoint runs now (synchronous stall = snapshot + write + fsync + rename) or the
// AsyncCheckpointWriter writes it in a thread (asynchronous stall = snapshot + hand-over; the
// write then overlaps training and its completion time is reported). The first save of each
// mode is reported apart (page faults of the fresh snapshot); medians over the later ones.
//
// Second table, encryption at rest (data/at_rest.h): the same synchronous save, and a load
// (CheckpointReader::verify: every piece read back and checksummed, what a resume reads) from the
// page cache (warm) and, where this process may drop the page cache (root: /proc/sys/vm/drop_caches),
// from the disk (cold: what a new job resuming reads), in clear and encrypted (AES-256-GCM under a
// random key), alternated in each round so that drift hits both; medians; the ratio encrypted /
// clear. The CPU's AES flags are printed (OpenSSL uses AES-NI/VAES).
// Usage: OMP_NUM_THREADS=2 bench_checkpoint [--dir D] [--repeats N (default 3)]
// The checkpoints go to a new folder myriad_bench_ckpt_<pid> inside D (default: the temporary
// directory), removed at the end; nothing else in D is touched (D may be a run's own folder).
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <random>
#include <sstream>

#include "harness.h"
#include "myriad/core/philox.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/distributed/loopback_communicator.h"
#include "myriad/train/checkpoint/async_checkpoint.h"
#include "myriad/train/checkpoint/checkpoint.h"
#include "myriad/train/checkpoint/checkpoint_reader.h"
#include "myriad/parallel/data_parallel.h"

using namespace myriad;
using namespace myriad::bench;

namespace {

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The pieces the engine writes from its owned snapshot (one process: everything).
std::vector<train::CheckpointPiece> pieces(const nn::ParameterStore& store, const parallel::OwnedState& state) {
  std::vector<train::CheckpointPiece> all;
  for (const parallel::ZeroSegment& segment : state.segments) {
    const nn::Parameter& p = store[segment.param];
    for (auto [packed, prefix] : {std::pair{&state.values, ""}, std::pair{&state.m, train::kAdamMPrefix},
                                  std::pair{&state.v, train::kAdamVPrefix}}) {
      std::vector<train::CheckpointPiece> more = train::segment_pieces(
          p, segment.begin - p.offset, segment.end - p.offset, *packed, segment.shard_position, prefix);
      all.insert(all.end(), more.begin(), more.end());
    }
  }
  return all;
}

train::CheckpointHeader header(std::int64_t step) {
  train::CheckpointHeader h;
  h.step = step;
  h.config_yaml = "bench";
  h.layout = "dp 1 x tp 1 x pp 1, zero_stage 0";
  return h;
}

// "aes vaes vpclmulqdq pclmulqdq" as far as /proc/cpuinfo lists them ("none" otherwise).
std::string aes_flags() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("flags", 0) != 0) continue;
    std::istringstream words(line.substr(line.find(':') + 1));
    std::string word, found;
    while (words >> word) {
      if (word == "aes" || word == "vaes" || word == "pclmulqdq" || word == "vpclmulqdq")
        found += (found.empty() ? "" : " ") + word;
    }
    return found.empty() ? "none" : found;
  }
  return "unknown";
}

// Writes back and drops the page cache; false where this process may not.
bool drop_page_cache() {
  ::sync();
  std::ofstream drop("/proc/sys/vm/drop_caches");
  if (!drop) return false;
  drop << "3\n";
  drop.close();
  return static_cast<bool>(drop);
}

data::AtRest random_key_at_rest() {
  std::random_device device;
  std::string key(32, '\0');
  for (char& c : key) c = static_cast<char>(device());
  data::KeyRing ring;
  ring.add("bench", key, true);
  return data::AtRest(ring);
}

}  // namespace

static int run(int argc, char** argv) {
  std::string dir_arg;
  int repeats = 3;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--dir") == 0 && i + 1 < argc) {
      dir_arg = argv[++i];
    } else if (std::strcmp(argv[i], "--repeats") == 0 && i + 1 < argc) {
      try {
        repeats = static_cast<int>(whole_option("--repeats", argv[++i]));
      } catch (const Error& e) {
        std::cerr << "bench_checkpoint: " << e.message() << "\n";
        return 2;
      }
    } else {
      std::cerr << "usage: bench_checkpoint [--dir D] [--repeats N]\n";
      return 2;
    }
  }
  print_header("bench_checkpoint: training stall of a checkpoint, synchronous vs asynchronous", argc, argv);
  // A folder of its own inside --dir: the saves prune old step folders and the end removes it all.
  const std::filesystem::path parent =
      dir_arg.empty() ? std::filesystem::temp_directory_path() : std::filesystem::path(dir_arg);
  if (!std::filesystem::is_directory(parent)) {
    std::cerr << "bench_checkpoint: --dir " << parent.string() << " is not a folder\n";
    return 2;
  }
  const std::filesystem::path dir = parent / ("myriad_bench_ckpt_" + std::to_string(::getpid()));
  nn::GptModel model(nn::TransformerConfig::gpt2(50257, 12, 12, 768, 1024));
  model.initialize(1);
  distributed::LoopbackCommunicator world("dp");
  parallel::DataParallel dp(model, world, parallel::DataParallelOptions{}, optim::AdamWConfig{});
  fill_uniform(dp.optimizer().m(), -1e-3f, 1e-3f, 2, 0);
  fill_uniform(dp.optimizer().v(), 0, 1e-6f, 2, 1);
  const double gib = 3.0 * static_cast<double>(model.parameters().flat_values().nbytes()) / (1u << 30);

  // One snapshot per mode, as the engine keeps one: the first save of each pays its page faults.
  parallel::OwnedState sync_state, async_state;
  train::AsyncCheckpointWriter writer;
  std::vector<double> sync_s, stall_s, done_s;
  for (int r = 0; r <= repeats; ++r) {
    auto start = std::chrono::steady_clock::now();
    dp.snapshot_owned(sync_state);
    train::save_checkpoint(dir.string(), header(2 * r + 1), pieces(model.parameters(), sync_state), 1, {});
    sync_s.push_back(seconds_since(start));

    writer.wait();  // the engine waits for the previous write before reusing the snapshot
    start = std::chrono::steady_clock::now();
    dp.snapshot_owned(async_state);
    writer.submit(train::checkpoint_path(dir.string(), 2 * r + 2),
                  [&, step = 2 * r + 2, snapshot = pieces(model.parameters(), async_state)] {
                    train::save_checkpoint(dir.string(), header(step), snapshot, 1, {});
                  });
    stall_s.push_back(seconds_since(start));
    writer.wait();
    done_s.push_back(seconds_since(start));
  }
  std::filesystem::remove_all(dir);

  auto later = [](const std::vector<double>& v) { return median(std::vector<double>(v.begin() + 1, v.end())); };
  Table table({"mode", "stall, first save (s)", "stall, later saves (median s)", "stall / sync (later)",
               "write done after (s)", "GiB", "later saves"});
  const double sync = later(sync_s), stall = later(stall_s);
  table.add_row(
      {"synchronous", fmt(sync_s[0], 3), fmt(sync, 3), "100%", fmt(sync, 3), fmt(gib, 2), std::to_string(repeats)});
  table.add_row({"asynchronous", fmt(stall_s[0], 3), fmt(stall, 3), percent(stall / sync), fmt(later(done_s), 3),
                 fmt(gib, 2), std::to_string(repeats)});
  std::cout << "- GPT-2 124M: " << fmt(static_cast<double>(model.parameters().numel()) / 1e6, 1)
            << "M parameters (flat, padded); checkpoint = parameters + AdamW m + v, f32; directory " << dir.string()
            << "\n\n";
  table.print();
  std::cout << "\n- bar: asynchronous stall <= 10% of the synchronous save: "
            << (stall <= 0.1 * sync ? "met" : "MISSED") << "\n";

  // Encryption at rest: save and load, clear and encrypted, alternated per round.
  const data::AtRest clear, encrypted = random_key_at_rest();
  const std::vector<train::CheckpointPiece> snapshot = pieces(model.parameters(), sync_state);
  std::vector<double> save_s[2], load_s[2], cold_s[2];
  bool cold = true;
  std::int64_t step = 1000;
  for (int r = 0; r < repeats; ++r) {
    for (int mode = 0; mode < 2; ++mode) {
      const data::AtRest& at_rest = mode == 0 ? clear : encrypted;
      auto start = std::chrono::steady_clock::now();
      const std::string path = train::save_checkpoint(dir.string(), header(++step), snapshot, 2, at_rest);
      save_s[mode].push_back(seconds_since(start));
      start = std::chrono::steady_clock::now();
      train::CheckpointReader(path, "", at_rest).verify();
      load_s[mode].push_back(seconds_since(start));
      if (cold && (cold = drop_page_cache())) {
        start = std::chrono::steady_clock::now();
        train::CheckpointReader(path, "", at_rest).verify();
        cold_s[mode].push_back(seconds_since(start));
      }
    }
  }
  std::filesystem::remove_all(dir);
  Table crypt(
      {"operation", "clear (median s)", "clear GiB/s", "encrypted (median s)", "encrypted GiB/s", "encrypted / clear"});
  const std::vector<double>* rows[3] = {save_s, load_s, cold_s};
  const char* names[3] = {"save (write + fsync + rename)", "load, page cache (read + checksum every piece)",
                          "load, cold (page cache dropped first)"};
  for (int op = 0; op < (cold ? 3 : 2); ++op) {
    const double c = median(rows[op][0]), e = median(rows[op][1]);
    crypt.add_row({names[op], fmt(c, 3), fmt(gib / c, 2), fmt(e, 3), fmt(gib / e, 2), fmt(e / c, 3) + "x"});
  }
  std::cout << "\n- encryption at rest: AES-256-GCM, 1 MiB chunks, OpenSSL EVP; CPU AES flags: " << aes_flags() << "; "
            << repeats << " rounds alternating clear and encrypted\n\n";
  crypt.print();
  if (!cold) std::cout << "\n- cold loads not measured: the page cache cannot be dropped (needs root)\n";
  const double save_ratio = median(save_s[1]) / median(save_s[0]), load_ratio = median(load_s[1]) / median(load_s[0]);
  std::cout << "\n- goal: encrypted at most 10% slower: save " << (save_ratio <= 1.10 ? "met" : "MISSED")
            << ", load from the page cache " << (load_ratio <= 1.10 ? "met" : "MISSED");
  if (cold) {
    const double cold_ratio = median(cold_s[1]) / median(cold_s[0]);
    std::cout << ", load from disk " << (cold_ratio <= 1.10 ? "met" : "MISSED");
  }
  std::cout << "\n";
  return 0;
}

int main(int argc, char** argv) {
  return myriad::bench::run_reporting_errors("bench_checkpoint", [&] { return run(argc, argv); });
}
