// bench_scaling: one model, every 3D layout (dp x tp x pp, with sequence parallelism and the
// interleaved schedule as variants) that the launched ranks allow, each training the same global
// batch: step time, tokens/s, exposed communication share and pipeline bubble share per layout,
// and the efficiency against the pure data-parallel layout measured in the same run — the
// DP / DP+TP / DP+TP+PP table of the cluster-training recipe.
//
// Run under mpirun with N ranks (N = 1, 2, 4, 8, ...):
//   mpirun -np 4 --oversubscribe --mca mpi_yield_when_idle 1 -x OMP_NUM_THREADS=1 bench_scaling [--quick]
// The model is GPT-2 style, L 8, H 8, C 256, T 128, vocabulary 512 (a BPE trained on a corpus the
// benchmark writes: random words from a fixed list, deterministic). Global batch 16 sequences of
// 128 tokens; micro-batch 2, so gradient accumulation = 16 / (2 dp) micro-batches per step (the
// pipeline's m). Each layout: 2 warm-up steps, then the median of `steps` timed steps (6; --quick
// 2). Shares are of the step time, averaged over ranks: comm = seconds blocked in communication
// (all axes), bubble = seconds blocked in pipeline receives. On a machine with fewer cores than
// ranks every layout time-shares the cores, so the table shows overheads, not speed-ups; the tool
// is for a cluster, one rank per GPU or socket.
#include <omp.h>
#include <unistd.h>

#include <array>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <optional>

#include "harness.h"
#include "myriad/config/run_config.h"
#include "myriad/core/logging.h"
#include "myriad/core/philox.h"
#include "myriad/distributed/mpi_runtime.h"
#include "myriad/distributed/process_groups.h"
#include "myriad/distributed/scalar_reduce.h"
#include "myriad/train/engine.h"

namespace fs = std::filesystem;
using namespace myriad;

namespace {

constexpr int kLayers = 8, kHeads = 8, kEmbd = 256, kSeq = 128, kMicroBatch = 2, kGlobalBatch = 16;

struct Layout {
  int dp = 1, tp = 1, pp = 1;
  bool sequence_parallel = false;
  int virtual_stages = 1;
  std::string describe() const {
    std::string s = "dp" + std::to_string(dp) + " tp" + std::to_string(tp) + " pp" + std::to_string(pp);
    if (sequence_parallel) s += " +sp";
    if (virtual_stages > 1) s += " interleaved v" + std::to_string(virtual_stages);
    return s;
  }
};

// Every factorisation of `world` the model and batch allow, pure dp first.
std::vector<Layout> layouts(int world) {
  std::vector<Layout> all;
  for (int tp = 1; tp <= world; tp *= 2) {
    for (int pp = 1; tp * pp <= world; pp *= 2) {
      if (world % (tp * pp) != 0) continue;
      const int dp = world / (tp * pp);
      const int accumulation = kGlobalBatch / (kMicroBatch * dp);
      if (kHeads % tp != 0 || kLayers % pp != 0 || accumulation < 1 || kGlobalBatch % (kMicroBatch * dp) != 0) continue;
      all.push_back({dp, tp, pp});
      if (tp > 1) all.push_back({dp, tp, pp, true});
      if (pp > 1 && kLayers % (2 * pp) == 0 && accumulation % pp == 0) all.push_back({dp, tp, pp, false, 2});
    }
  }
  std::stable_sort(all.begin(), all.end(), [](const Layout& a, const Layout& b) { return a.dp > b.dp; });
  return all;
}

// A deterministic corpus of random words (enough for the BPE and a few hundred steps).
void write_corpus(const fs::path& path) {
  const char* words[] = {"the",    "cat",   "sat",   "on",    "a",     "mat",    "while",   "river",
                         "moon",   "king",  "quiet", "stone", "under", "bright", "follows", "remembers",
                         "shadow", "baker", "red",   "ball",  "every", "child"};
  std::ofstream out(path);
  for (std::uint64_t line = 0; line < 40000; ++line) {
    const std::array<std::uint32_t, 4> a = philox4x32(2026, 1, 3 * line), b = philox4x32(2026, 1, 3 * line + 1),
                                       c = philox4x32(2026, 1, 3 * line + 2);
    const std::uint32_t draws[12] = {a[0], a[1], a[2], a[3], b[0], b[1], b[2], b[3], c[0], c[1], c[2], c[3]};
    for (int w = 0; w < 12; ++w) out << words[draws[w] % 22] << (w == 11 ? ".\n" : " ");
  }
}

RunConfig config_for(const fs::path& dir, const Layout& l, int rank) {
  RunConfig c;
  c.model.vocab_size = 512;
  c.model.n_layer = kLayers;
  c.model.n_head = kHeads;
  c.model.n_embd = kEmbd;
  c.model.context_length = kSeq;
  c.training.seq_len = kSeq;
  c.training.micro_batch = kMicroBatch;
  c.training.gradient_accumulation = kGlobalBatch / (kMicroBatch * l.dp);
  c.training.steps = 1000;
  c.training.eval_every = 0;
  c.parallel.dp = l.dp;
  c.parallel.tp = l.tp;
  c.parallel.pp = l.pp;
  c.parallel.sequence_parallel = l.sequence_parallel;
  c.parallel.virtual_stages = l.virtual_stages;
  if (l.virtual_stages > 1) c.parallel.pp_schedule = PipelineSchedule::interleaved;
  c.data.path = (dir / "corpus.txt").string();
  c.data.cache_dir = (dir / "data").string();
  c.data.tokenizer = "train:512";
  c.logging.dir = (dir / ("rank" + std::to_string(rank))).string();
  c.logging.jsonl = false;
  c.logging.tensorboard = false;
  c.logging.measure_peak = false;
  c.checkpoint.dir = (dir / "checkpoints").string();
  return c;
}

struct Measured {
  double step_s = 0, tokens_per_s = 0, comm_share = 0, bubble_share = 0;
};

Measured measure(distributed::MpiRuntime& runtime, distributed::Communicator& world, const fs::path& dir,
                 const Layout& l, int steps) {
  distributed::ProcessGroups groups(distributed::GridShape{.tp = l.tp, .dp = l.dp, .pp = l.pp}, runtime.world());
  train::Engine engine(config_for(dir, l, world.rank()), make_rank_logger(world.rank(), "warn"), &groups);
  for (int i = 0; i < 2; ++i) engine.step();
  std::vector<double> times;
  double comm = 0, bubble = 0, total = 0;
  for (int i = 0; i < steps; ++i) {
    train::StepMetrics m = engine.step();
    const std::vector<double> per_rank = distributed::gather_over_ranks(world, m.seconds);
    times.push_back(*std::max_element(per_rank.begin(), per_rank.end()));
    comm += m.comm_seconds;
    bubble += m.bubble_seconds;
    total += m.seconds;
  }
  Measured r;
  r.step_s = bench::median(times);
  r.tokens_per_s = static_cast<double>(engine.tokens_per_step()) / r.step_s;
  r.comm_share = distributed::sum_over_ranks(world, comm / total) / world.size();
  r.bubble_share = distributed::sum_over_ranks(world, bubble / total) / world.size();
  return r;
}

}  // namespace

int main(int argc, char** argv) {
  distributed::MpiRuntime runtime(&argc, &argv);
  constexpr const char* kUsage =
      "usage: mpirun -np N bench_scaling [--quick]   (N ranks: 1, 2, 4, 8 or more, a power of two)";
  bool quick = false;
  int code = 0;
  {
    std::unique_ptr<distributed::Communicator> world = runtime.world();
    // Every rank sees the same argv and world size: all refuse alike, before any collective.
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--quick") {
        quick = true;
        continue;
      }
      if (world->rank() == 0) {
        if (arg == "--help")
          std::cout << kUsage << "\n";
        else
          std::cerr << "bench_scaling: unknown option '" << arg << "'; " << kUsage << "\n";
      }
      return arg == "--help" ? 0 : 2;
    }
    const std::vector<Layout> all = layouts(world->size());
    if (all.empty()) {
      if (world->rank() == 0) {
        std::cerr << "bench_scaling: no dp x tp x pp layout of " << world->size() << " ranks fits the model (H "
                  << kHeads << ", L " << kLayers << ", global batch " << kGlobalBatch << " of micro-batches of "
                  << kMicroBatch << ", powers of two); " << kUsage << "\n";
      }
      return 2;
    }
    try {
      std::int64_t pid = world->rank() == 0 ? ::getpid() : 0;
      pid = distributed::sum_over_ranks(*world, pid);
      const fs::path dir = fs::temp_directory_path() / ("myriad_bench_scaling_" + std::to_string(pid));
      distributed::run_on_rank0(*world, "corpus", [&] {
        fs::create_directories(dir);
        write_corpus(dir / "corpus.txt");
      });
      if (world->rank() == 0) {
        bench::print_header("bench_scaling", argc, argv);
        std::cout << "- ranks: " << world->size() << ", OMP threads per rank: " << omp_get_max_threads() << "\n"
                  << "- model: GPT-2 style L " << kLayers << ", H " << kHeads << ", C " << kEmbd << ", T " << kSeq
                  << ", V 512; global batch " << kGlobalBatch << " x " << kSeq << " tokens, micro-batch " << kMicroBatch
                  << "; pipeline schedule 1F1B unless interleaved\n"
                  << "- time: median over " << (quick ? 2 : 6) << " steps of the slowest rank's step; shares: of the "
                  << "step, mean over ranks\n\n"
                  << std::flush;
      }
      // The baseline is pure dp where the batch allows it (up to 8 ranks); from 16 ranks dp alone
      // would leave no micro-batch per rank, and the first layout (the most dp) is named instead.
      const bool pure_dp = all.front().tp == 1 && all.front().pp == 1;
      bench::Table table({"layout", "step ms", "tokens/s", "comm share", "bubble share",
                          pure_dp ? std::string("vs dp only") : "vs " + all.front().describe()});
      std::optional<double> baseline;
      for (const Layout& l : all) {
        Measured m = measure(runtime, *world, dir, l, quick ? 2 : 6);
        if (!baseline) baseline = m.tokens_per_s;
        table.add_row({l.describe(), bench::fmt(1e3 * m.step_s, 0), bench::fmt(m.tokens_per_s, 0),
                       bench::percent(m.comm_share), bench::percent(m.bubble_share),
                       bench::percent(m.tokens_per_s / *baseline)});
      }
      if (world->rank() == 0) table.print();
      distributed::run_on_rank0(*world, "cleanup", [&] { fs::remove_all(dir); });
    } catch (const Error& e) {
      std::cerr << "bench_scaling: " << e.message() << std::endl;
      code = 1;
      world->abort(1, e.message());
    }
  }
  return code;
}
