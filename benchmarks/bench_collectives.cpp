// bench_collectives — nccl-tests-style sweep of the Communicator collectives.
//
//   mpirun -np N build/benchmarks/bench_collectives [--min-bytes 8] [--max-bytes 256M] [--factor 2]
//          [--iters 20] [--warmup 5] [--op all|all_reduce|all_gather|reduce_scatter|all_to_all|
//          broadcast|send_recv[,...]] [--transport mpi]
//   mpirun -np N build/benchmarks/bench_collectives --algorithms ring,tree,hierarchical --ranks-per-node L
//   (each algorithm also as ring+exact, tree+exact, hierarchical+exact: parallel.dp_reduce_exact)
//   mpirun -np N build/benchmarks/bench_collectives --op all_reduce [--group-size G] --profile FILE
//   (merges the link into a machine profile: alpha and beta fitted to the all-reduce times with
//   the step-time model's ring formula, machine_profile.h fit_ring_all_reduce)
//
// --group-size G splits the N ranks into N/G groups of G consecutive ranks that all run the op at
// once (a tp group of G inside a world of N, every group busy): on a machine whose ranks
// time-share cores the link a group sees depends on how many ranks share the node, not only on
// the group. The time is the slowest rank's over the whole world. With --profile every run writes
// links.intra_by_ranks."NxG" (N ranks on the node, groups of G), and a run with G = N whose ranks
// each have a core of their own (N <= the cores) also writes links.intra (the uncontended link).
//
// --compute-gemms R times each call as a training step meets it: every rank first runs R f32
// GEMMs of 128 x 128 x 128 (the compute between two collectives), then the op. The same GEMM loop
// without the op is timed next to it (all ranks at once, the cores shared as in the step); the
// reported time is the median over 9 such pairs of the loop with the op minus the loop without
// it: what the op adds to a step, with the waits for peers that time-sharing ranks reach it late,
// and the CPU that waiting ranks take from computing ones. --profile then writes the link under
// links.intra_in_step_by_ranks.
//
// With --algorithms it compares all-reduce algorithms instead (parallel.dp_reduce) at every size,
// interleaving them round by round (this machine's speed drifts): time (fastest round), bytes
// each rank sent, and the bytes that crossed simulated nodes of L consecutive ranks per rank
// (max over ranks; the hierarchical one from its inter-node group's counters, the ring's and the
// tree's from their message pattern). Every algorithm's result is checked first.
//
// For every op and every size (the total buffer size in bytes, f32 elements, as in nccl-tests)
// it first checks the result against values known in closed form (aborting the job on a
// mismatch), then times `iters` back-to-back blocking calls after a barrier, three such blocks, and
// reports the fastest block's largest mean time over the ranks, algbw = size / time and busbw = algbw x nccl-tests'
// factor (all_reduce 2(n-1)/n; all_gather, reduce_scatter, all_to_all (n-1)/n; broadcast, send_recv 1). It also reports
// the bytes rank 0 handed to the transport per call (from the communicator's statistics) next to the analytic volume of
// the algorithm; "bytes ok" means every rank matched. The number of iterations falls for big sizes so that a full sweep
// stays short.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <iostream>
#include <limits>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "harness.h"
#include "myriad/core/cli_numbers.h"
#include "machine_profile.h"
#include "myriad/core/error.h"
#include "myriad/core/tensor.h"
#include "myriad/distributed/communicator.h"
#include "myriad/ops/exact_sum.h"
#include "myriad/distributed/hierarchical_communicator.h"
#include "myriad/distributed/mpi_runtime.h"
#include "myriad/distributed/ring_communicator.h"
#include "myriad/distributed/tree_communicator.h"
#include "myriad/ops/matmul.h"

namespace {

using myriad::DType;
using myriad::Tensor;
using myriad::distributed::CommOp;
using myriad::distributed::Communicator;

struct Args {
  std::int64_t min_bytes = 8;
  std::int64_t max_bytes = std::int64_t{256} << 20;
  double factor = 2.0;
  int iters = 20;
  int warmup = 5;
  std::vector<std::string> ops;
  std::string transport = "mpi";
  std::vector<std::string> algorithms;  // --algorithms: compare all-reduce algorithms
  int ranks_per_node = 1;
  std::string profile;    // --profile FILE: write the link fitted to the all-reduce sweep
  int group_size = 0;     // --group-size G: concurrent groups of G consecutive ranks (0: the whole world)
  int compute_gemms = 0;  // --compute-gemms R: R GEMMs of 128^3 before every call (0: none)
};

const std::vector<std::string> kAllOps = {"all_reduce", "all_gather", "reduce_scatter",
                                          "all_to_all", "broadcast",  "send_recv"};

std::int64_t parse_bytes(const std::string& text) {
  std::size_t end = 0;
  double value = 0;
  try {
    value = std::stod(text, &end);
  } catch (const std::exception&) {
    MYRIAD_THROW("size '" << text << "': not a number (e.g. 4K, 32M, 1G)");
  }
  const std::string suffix = text.substr(end);
  if (suffix == "K" || suffix == "k")
    value *= 1024.0;
  else if (suffix == "M" || suffix == "m")
    value *= 1024.0 * 1024.0;
  else if (suffix == "G" || suffix == "g")
    value *= 1024.0 * 1024.0 * 1024.0;
  else
    MYRIAD_CHECK(suffix.empty(), "size '" << text << "': suffix must be K, M or G");
  return static_cast<std::int64_t>(value);
}

Args parse_args(int argc, char** argv) {
  Args args;
  std::string ops = "all";
  for (int i = 1; i < argc; ++i) {
    const std::string key = argv[i];
    MYRIAD_CHECK(i + 1 < argc, "option " << key << " needs a value");
    const std::string value = argv[++i];
    if (key == "--min-bytes")
      args.min_bytes = parse_bytes(value);
    else if (key == "--max-bytes")
      args.max_bytes = parse_bytes(value);
    else if (key == "--factor")
      args.factor = myriad::tools::parse_double(key, value);
    else if (key == "--iters")
      args.iters = static_cast<int>(myriad::bench::whole_option(key, value, 1));
    else if (key == "--warmup")
      args.warmup = static_cast<int>(myriad::bench::whole_option(key, value, 0));
    else if (key == "--op")
      ops = value;
    else if (key == "--transport")
      args.transport = value;
    else if (key == "--ranks-per-node")
      args.ranks_per_node = static_cast<int>(myriad::bench::whole_option(key, value, 1));
    else if (key == "--profile")
      args.profile = value;
    else if (key == "--group-size")
      args.group_size = static_cast<int>(myriad::bench::whole_option(key, value, 0));
    else if (key == "--compute-gemms")
      args.compute_gemms = static_cast<int>(myriad::bench::whole_option(key, value, 0));
    else if (key == "--algorithms") {
      std::stringstream list(value);
      for (std::string a; std::getline(list, a, ',');) {
        const std::string base = a.substr(0, a.find("+exact"));
        MYRIAD_CHECK(
            (base == "ring" || base == "tree" || base == "hierarchical") && (a == base || a == base + "+exact"),
            "--algorithms " << a << ": allowed: ring, tree, hierarchical, each optionally +exact");
        args.algorithms.push_back(a);
      }
    } else
      MYRIAD_THROW(
          "unknown option " << key
                            << "; allowed: --min-bytes --max-bytes --factor --iters --warmup --op"
                               " --transport --algorithms --ranks-per-node --profile --group-size --compute-gemms");
  }
  MYRIAD_CHECK(args.min_bytes >= 4 && args.max_bytes >= args.min_bytes, "need 4 <= --min-bytes <= --max-bytes");
  MYRIAD_CHECK(args.factor > 1.0, "--factor must be > 1");
  MYRIAD_CHECK(args.compute_gemms >= 0 && args.group_size >= 0, "--compute-gemms and --group-size must be >= 0");
  MYRIAD_CHECK(args.algorithms.empty() || (args.group_size == 0 && args.compute_gemms == 0),
               "--group-size and --compute-gemms time the communicator's own ops; --algorithms compares "
               "all-reduce algorithms on the whole world, back to back");
  MYRIAD_CHECK(args.iters >= 1 && args.warmup >= 0, "--iters must be >= 1 and --warmup >= 0");
  // Only the MPI host transport exists so far; `--transport nccl` will select NcclCommunicator
  // (device buffers) once it is built — the sweep below does not depend on the transport.
  MYRIAD_CHECK(args.transport == "mpi", "--transport " << args.transport << ": only 'mpi' is available");
  MYRIAD_CHECK(args.profile.empty() || args.algorithms.empty(),
               "--profile: --algorithms compares all-reduce algorithms and writes no profile (the --op sweep does)");
  std::stringstream list(ops);
  for (std::string op; std::getline(list, op, ',');) {
    if (op == "all") {
      args.ops.insert(args.ops.end(), kAllOps.begin(), kAllOps.end());
      continue;
    }
    MYRIAD_CHECK(std::find(kAllOps.begin(), kAllOps.end(), op) != kAllOps.end(),
                 "--op " << op
                         << ": allowed: all, all_reduce, all_gather, reduce_scatter, all_to_all, broadcast,"
                            " send_recv");
    args.ops.push_back(op);
  }
  MYRIAD_CHECK(args.profile.empty() || !args.algorithms.empty() ||
                   std::find(args.ops.begin(), args.ops.end(), "all_reduce") != args.ops.end(),
               "--profile needs the all_reduce op (the link fit uses its times)");
  return args;
}

std::int64_t chunk_elements(std::int64_t n, int parts, int i) {
  i = ((i % parts) + parts) % parts;
  return n * (i + 1) / parts - n * i / parts;
}

// Children of relative rank v in the binomial broadcast tree over n ranks.
int binomial_children(int v, int n) {
  int children = 0;
  for (int step = 1; step < n; step <<= 1) {
    if (v != 0 && step >= (v & -v)) break;
    if (v + step < n) ++children;
  }
  return children;
}

// One op at one size: buffers, the call, the closed-form check and the analytic volume.
struct Case {
  std::int64_t count = 0;  // elements of the total buffer
  double bus_factor = 1.0;
  std::int64_t analytic_sent = 0;  // bytes this rank sends per call
  std::function<void()> prepare;   // fills inputs with the check pattern
  std::function<void()> run;
  std::function<std::int64_t()> check;  // mismatching elements
  std::function<void()> quiet;          // refills inputs so repeated calls stay finite
};

float pattern(int rank, std::int64_t i) { return static_cast<float>(rank * 1000 + i % 97); }

Case make_case(const std::string& op, std::int64_t bytes, Communicator& comm) {
  const int n = comm.size(), r = comm.rank();
  const int next = (r + 1) % n, prev = (r + n - 1) % n;
  Case c;
  c.count = bytes / 4;
  if (op == "all_gather" || op == "reduce_scatter" || op == "all_to_all") c.count = c.count / n * n;
  const std::int64_t count = c.count;
  const std::int64_t S = count * 4;
  const int rank_sum = n * (n + 1) / 2;  // 1 + 2 + ... + n: the sum of (r + 1) over the ranks, exact
  if (op == "all_reduce") {
    Tensor t = Tensor::empty({count});
    c.bus_factor = 2.0 * (n - 1) / n;
    c.analytic_sent = 4 * (2 * count - chunk_elements(count, n, r) - chunk_elements(count, n, r + 1));
    c.prepare = [=] {
      float* p = t.data<float>();
      for (std::int64_t i = 0; i < count; ++i) p[i] = static_cast<float>((r + 1) * (i % 13 + 1));
    };
    c.run = [&comm, t] { comm.all_reduce(t); };
    c.check = [=] {
      const float* p = t.data<float>();
      std::int64_t bad = 0;
      for (std::int64_t i = 0; i < count; ++i) bad += p[i] != static_cast<float>(rank_sum * (i % 13 + 1));
      return bad;
    };
    c.quiet = [=]() mutable { t.zero(); };
  } else if (op == "reduce_scatter") {
    const std::int64_t begin = count * r / n, own = chunk_elements(count, n, r);
    Tensor in = Tensor::empty({count}), out = Tensor::empty({own});
    c.bus_factor = static_cast<double>(n - 1) / n;
    c.analytic_sent = 4 * (count - own);
    c.prepare = [=] {
      float* p = in.data<float>();
      for (std::int64_t i = 0; i < count; ++i) p[i] = static_cast<float>((r + 1) * (i % 13 + 1));
    };
    c.run = [&comm, in, out] { comm.reduce_scatter(in, out); };
    c.check = [=] {
      const float* p = out.data<float>();
      std::int64_t bad = 0;
      for (std::int64_t i = 0; i < own; ++i) bad += p[i] != static_cast<float>(rank_sum * ((begin + i) % 13 + 1));
      return bad;
    };
    c.quiet = [] {};
  } else if (op == "all_gather") {
    const std::int64_t begin = count * r / n, own = chunk_elements(count, n, r);
    Tensor in = Tensor::empty({own}), out = Tensor::empty({count});
    c.bus_factor = static_cast<double>(n - 1) / n;
    c.analytic_sent = 4 * (count - chunk_elements(count, n, r + 1));
    c.prepare = [=] {
      float* p = in.data<float>();
      for (std::int64_t i = 0; i < own; ++i) p[i] = pattern(r, begin + i);
    };
    c.run = [&comm, in, out] { comm.all_gather(in, out); };
    c.check = [=] {
      const float* p = out.data<float>();
      std::int64_t bad = 0;
      for (int q = 0; q < n; ++q) {
        for (std::int64_t i = count * q / n; i < count * (q + 1) / n; ++i) bad += p[i] != pattern(q, i);
      }
      return bad;
    };
    c.quiet = [] {};
  } else if (op == "all_to_all") {
    const std::int64_t k = count / n;
    Tensor in = Tensor::empty({count}), out = Tensor::empty({count});
    c.bus_factor = static_cast<double>(n - 1) / n;
    c.analytic_sent = 4 * (n - 1) * k;
    c.prepare = [=] {
      float* p = in.data<float>();
      for (std::int64_t i = 0; i < count; ++i) p[i] = pattern(r, i);
    };
    c.run = [&comm, in, out] { comm.all_to_all(in, out); };
    c.check = [=] {  // chunk q of the output is chunk r of rank q's input
      const float* p = out.data<float>();
      std::int64_t bad = 0;
      for (int q = 0; q < n; ++q) {
        for (std::int64_t j = 0; j < k; ++j) bad += p[q * k + j] != pattern(q, r * k + j);
      }
      return bad;
    };
    c.quiet = [] {};
  } else if (op == "broadcast") {
    Tensor t = Tensor::empty({count});
    c.bus_factor = 1.0;
    c.analytic_sent = S * binomial_children(r, n);  // root 0
    c.prepare = [=] {
      float* p = t.data<float>();
      for (std::int64_t i = 0; i < count; ++i) p[i] = r == 0 ? pattern(0, i) : -1.0f;
    };
    c.run = [&comm, t] { comm.broadcast(t, 0); };
    c.check = [=] {
      const float* p = t.data<float>();
      std::int64_t bad = 0;
      for (std::int64_t i = 0; i < count; ++i) bad += p[i] != pattern(0, i);
      return bad;
    };
    c.quiet = [] {};
  } else {  // send_recv: every rank sends to the next and receives from the previous one
    Tensor out = Tensor::empty({count}), in = Tensor::empty({count});
    c.bus_factor = 1.0;
    c.analytic_sent = S;
    c.prepare = [=]() mutable {
      float* p = out.data<float>();
      for (std::int64_t i = 0; i < count; ++i) p[i] = pattern(r, i);
      in.fill(-1.0);
    };
    c.run = [&comm, out, in, next, prev] {
      auto sent = comm.send_async(out, next);
      comm.recv(in, prev);
      sent->wait();
    };
    c.check = [=] {
      const float* p = in.data<float>();
      std::int64_t bad = 0;
      for (std::int64_t i = 0; i < count; ++i) bad += p[i] != pattern(prev, i);
      return bad;
    };
    c.quiet = [] {};
  }
  return c;
}

// Fewer iterations for big sizes: about 256 MiB moved per timed block, at least 2 calls.
int iterations_for(std::int64_t bytes, int iters) {
  const std::int64_t budget = std::int64_t{256} << 20;
  return static_cast<int>(
      std::max<std::int64_t>(2, std::min<std::int64_t>(iters, budget / std::max<std::int64_t>(bytes, 1))));
}

std::int64_t max_over_ranks(Communicator& control, std::int64_t value) {
  Tensor t = Tensor::full({1}, 0.0, DType::i64);
  t.data<std::int64_t>()[0] = value;
  control.all_reduce(t, myriad::distributed::ReduceOp::max);
  return t.data<std::int64_t>()[0];
}

// The compute a step does between two collectives: `count` f32 GEMMs of 128 x 128 x 128.
class GemmWork {
 public:
  explicit GemmWork(int count)
      : count_(count),
        a_(Tensor::full({128, 128}, 0.5)),
        b_(Tensor::full({128, 128}, 0.25)),
        c_(Tensor::empty({128, 128})) {}
  void run() {
    for (int i = 0; i < count_; ++i) myriad::matmul_forward(myriad::MatmulArgs{}, a_, b_, c_);
  }
  bool empty() const { return count_ == 0; }

 private:
  int count_;
  Tensor a_, b_, c_;
};

std::string cpu_model() {
  std::string line = myriad::bench::describe_machine();
  return line.substr(0, line.find(','));
}

// Times one op over the sizes; returns (bytes, seconds per call) of every size (rank 0's view: the
// slowest rank's mean).
std::vector<std::pair<double, double>> run_op(const std::string& op, const Args& args, Communicator& comm,
                                              Communicator& control) {
  std::vector<std::pair<double, double>> points;
  const bool reporter = control.rank() == 0;  // world rank 0 prints (every group has a rank 0)
  GemmWork work(args.compute_gemms);
  const CommOp stat_op = op == "all_reduce"       ? CommOp::all_reduce
                         : op == "all_gather"     ? CommOp::all_gather
                         : op == "reduce_scatter" ? CommOp::reduce_scatter
                         : op == "all_to_all"     ? CommOp::all_to_all
                         : op == "broadcast"      ? CommOp::broadcast
                                                  : CommOp::send;
  myriad::bench::Table table({"size (B)", "count", "type", "iters", "time (us)", "algbw (GB/s)", "busbw (GB/s)",
                              "sent/rank (B)", "analytic (B)", "bytes", "check"});
  for (double size = static_cast<double>(args.min_bytes); size <= static_cast<double>(args.max_bytes) * 1.0000001;
       size *= args.factor) {
    const auto bytes = static_cast<std::int64_t>(size);
    Case c = make_case(op, bytes, comm);
    if (c.count == 0) continue;
    // Correctness first.
    c.prepare();
    c.run();
    const std::int64_t bad = max_over_ranks(control, c.check());
    if (bad != 0) {
      std::ostringstream reason;
      reason << "bench_collectives: " << op << " of " << c.count * 4 << " bytes: " << bad
             << " elements differ from the expected values on some rank";
      comm.abort(1, reason.str());
    }
    // Timing (with --compute-gemms: the GEMM loop with the op minus the loop alone).
    c.quiet();
    const int iters = iterations_for(c.count * 4, args.iters);
    for (int i = 0; i < std::min(args.warmup, iters); ++i) {
      work.run();
      c.run();
    }
    auto timed = [&](bool with_op) {
      control.barrier();
      const auto start = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) {
        work.run();
        if (with_op) c.run();
      }
      const auto ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
      return max_over_ranks(control, ns);
    };
    // Back to back: the fastest of kBlockRounds timed blocks (a rank descheduled by another process
    // stretches one block, not the link). After compute: the median over kStepRounds rounds of (loop
    // with the op - loop without), each pair timed next to each other (this host's speed drifts); a
    // median <= 0 means the op added nothing measurable: reported as hidden, left out of the fit.
    constexpr int kBlockRounds = 3, kStepRounds = 9;
    std::int64_t slowest_ns = 0;
    if (work.empty()) {
      slowest_ns = std::numeric_limits<std::int64_t>::max();
      for (int round = 0; round < kBlockRounds; ++round) {
        comm.reset_stats();
        slowest_ns = std::min(slowest_ns, timed(true));
      }
    } else {
      std::vector<std::int64_t> added;
      for (int round = 0; round < kStepRounds; ++round) {
        const std::int64_t without = timed(false);
        comm.reset_stats();
        added.push_back(timed(true) - without);
      }
      std::nth_element(added.begin(), added.begin() + kStepRounds / 2, added.end());
      slowest_ns = added[kStepRounds / 2];
    }
    const myriad::distributed::CommStats stats = comm.stats();
    const std::int64_t sent = stats[stat_op].bytes_sent / iters;
    const bool bytes_ok = stats[stat_op].bytes_sent == c.analytic_sent * iters;
    const bool all_bytes_ok = max_over_ranks(control, bytes_ok ? 0 : 1) == 0;
    if (reporter) {
      const double seconds = static_cast<double>(slowest_ns) * 1e-9 / iters;
      const double total = static_cast<double>(c.count) * 4.0;
      const bool hidden = slowest_ns <= 0;
      if (!hidden) points.emplace_back(total, seconds);
      const double algbw = total / seconds * 1e-9;
      table.add_row({std::to_string(c.count * 4), std::to_string(c.count), "f32", std::to_string(iters),
                     hidden ? "hidden" : myriad::bench::fmt(seconds * 1e6, 1),
                     hidden ? "-" : myriad::bench::fmt(algbw, 3),
                     hidden ? "-" : myriad::bench::fmt(algbw * c.bus_factor, 3), std::to_string(sent),
                     std::to_string(c.analytic_sent), all_bytes_ok ? "ok" : "MISMATCH", "ok"});
    }
  }
  if (reporter) {
    std::cout << "## " << op << (comm.size() < control.size() ? " (every group at once)" : "");
    if (args.compute_gemms > 0)
      std::cout << " (after " << args.compute_gemms << " GEMMs of 128^3 per call; time = what the op adds)";
    std::cout << "\n\n";
    table.print();
    std::cout << "\ncheck: ok (every size, every rank)\n\n" << std::flush;
  }
  return points;
}

// The link fitted to the all-reduce points of groups of `group` ranks among `ranks` on the node
// (world rank 0 writes): links.intra_by_ranks."NxG" (links.intra_in_step_by_ranks."NxG" after
// compute), and links.intra when one group holds every rank and each rank has a core of its own.
void write_profile(const Args& args, const std::vector<std::pair<double, double>>& points, int ranks, int group,
                   int argc, char** argv) {
  const bool in_step = args.compute_gemms > 0;
  const myriad::bench::AlphaBeta fit = myriad::bench::fit_ring_all_reduce(points, group);
  std::ostringstream how;
  how << "bench_collectives all_reduce, " << ranks << " ranks";
  if (group < ranks) how << " in " << ranks / group << " concurrent groups of " << group;
  if (in_step)
    how << ", each call after " << args.compute_gemms << " GEMMs of 128^3 (time = loop with the op - loop without)";
  how << ", " << points.size() << " sizes " << args.min_bytes << ".." << args.max_bytes
      << " B; weighted least squares (1/t^2) on t = 2(n-1) alpha + 2(n-1)/n bytes beta; max relative error "
      << myriad::bench::fmt(100.0 * fit.max_relative_error, 1) << "%";
  const nlohmann::json link = {{"alpha_s", fit.alpha_s},
                               {"beta_s_per_byte", fit.beta_s_per_byte},
                               {"ranks", ranks},
                               {"group", group},
                               {"measured_with", how.str()}};
  const std::string key = std::to_string(ranks) + "x" + std::to_string(group);
  std::vector<myriad::bench::ProfilePart> parts = {
      {std::string(in_step ? "links.intra_in_step_by_ranks." : "links.intra_by_ranks.") + key, link}};
  const bool uncontended = !in_step && group == ranks && ranks <= static_cast<int>(std::thread::hardware_concurrency());
  if (uncontended) parts.emplace_back("links.intra", link);
  myriad::bench::merge_machine_profile(args.profile, "bench_collectives_" + key, parts, argc, argv);
  std::cout << "profile: " << args.profile << ": " << parts.front().first << (uncontended ? " and links.intra" : "")
            << ": alpha " << myriad::bench::fmt(fit.alpha_s * 1e6, 2) << " us, beta " << fit.beta_s_per_byte << " s/B ("
            << myriad::bench::fmt(1e-9 / fit.beta_s_per_byte, 2) << " GB/s), max relative error "
            << myriad::bench::fmt(100.0 * fit.max_relative_error, 1) << "%\n";
}

// Bytes rank `r` sends to ranks on other nodes in one all-reduce of `count` elements of
// `element_bytes` (nodes of `per_node` consecutive ranks): the ring forwards 2(n-1) chunks to r+1;
// the tree sends its partial to r - 2^k in the reduction and the whole buffer to its binomial
// children in the broadcast. "+exact": an int32 max all-reduce of the block exponents, then the
// int64 all-reduce of the values.
std::int64_t cross_node_bytes(const std::string& algorithm, std::int64_t count, int n, int r, int per_node,
                              std::int64_t element_bytes = 4) {
  const std::size_t exact = algorithm.find("+exact");
  if (exact != std::string::npos) {
    const std::string base = algorithm.substr(0, exact);
    return cross_node_bytes(base, myriad::exact_sum_blocks(count), n, r, per_node, 4) +
           cross_node_bytes(base, count, n, r, per_node, 8);
  }
  auto node = [&](int rank) { return rank / per_node; };
  std::int64_t bytes = 0;
  if (algorithm == "ring") {
    if (node(r) != node((r + 1) % n))
      bytes = element_bytes * (2 * count - chunk_elements(count, n, r) - chunk_elements(count, n, r + 1));
  } else if (algorithm == "tree") {
    for (int mask = 1; mask < n; mask <<= 1) {
      if (r & mask) {
        if (node(r) != node(r - mask)) bytes += element_bytes * count;
        break;
      }
    }
    for (int step = 1; step < n; step <<= 1) {  // binomial broadcast from 0 (bench's rule above)
      if (r != 0 && step >= (r & -r)) break;
      if (r + step < n && node(r) != node(r + step)) bytes += element_bytes * count;
    }
  }
  return bytes;
}

void compare_algorithms(const Args& args, myriad::distributed::MpiRuntime& runtime, Communicator& control) {
  const int n = runtime.world_size(), r = runtime.world_rank();
  const int rank_sum = n * (n + 1) / 2;  // 1 + 2 + ... + n: the sum of (r + 1) over the ranks, exact
  MYRIAD_CHECK(args.ranks_per_node >= 1 && n % args.ranks_per_node == 0,
               "--ranks-per-node " << args.ranks_per_node << " must divide the " << n << " ranks");
  const myriad::distributed::NodeGrouping grouping{n / args.ranks_per_node, args.ranks_per_node};
  std::vector<std::unique_ptr<Communicator>> comms;
  for (const std::string& a : args.algorithms) {
    const bool exact = a.find("+exact") != std::string::npos;
    if (a == "ring") comms.push_back(runtime.world());
    if (a == "ring+exact")
      comms.push_back(std::make_unique<myriad::distributed::RingCommunicator>(runtime.world(), true));
    if (a.rfind("tree", 0) == 0)
      comms.push_back(std::make_unique<myriad::distributed::TreeCommunicator>(runtime.world(), exact));
    if (a.rfind("hierarchical", 0) == 0)
      comms.push_back(
          std::make_unique<myriad::distributed::HierarchicalCommunicator>(runtime.world(), grouping, exact));
  }
  std::vector<std::string> header = {"size (B)"};
  for (const std::string& a : args.algorithms) {
    header.push_back(a + " (us)");
    header.push_back(a + " sent/rank");
    header.push_back(a + " cross-node/rank");
  }
  header.emplace_back("fastest");
  myriad::bench::Table table(header);
  for (double size = static_cast<double>(args.min_bytes); size <= static_cast<double>(args.max_bytes) * 1.0000001;
       size *= args.factor) {
    const std::int64_t count = static_cast<std::int64_t>(size) / 4;
    if (count == 0) continue;
    const int iters = iterations_for(count * 4, args.iters);
    std::vector<Tensor> tensors;
    for (std::size_t a = 0; a < comms.size(); ++a) {  // check each algorithm's result first
      Tensor t = Tensor::empty({count});
      float* p = t.data<float>();
      for (std::int64_t i = 0; i < count; ++i) p[i] = static_cast<float>((r + 1) * (i % 13 + 1));
      comms[a]->all_reduce(t);
      std::int64_t bad = 0;
      for (std::int64_t i = 0; i < count; ++i) bad += p[i] != static_cast<float>(rank_sum * (i % 13 + 1));
      if (max_over_ranks(control, bad) != 0) comms[a]->abort(1, "bench_collectives: " + args.algorithms[a] + " wrong");
      t.zero();
      tensors.push_back(t);
      for (int w = 0; w < args.warmup; ++w) comms[a]->all_reduce(t);
    }
    std::vector<std::int64_t> best(comms.size(), INT64_MAX), sent(comms.size()), cross(comms.size());
    constexpr int kRounds = 5;
    for (int round = 0; round < kRounds; ++round) {
      for (std::size_t a = 0; a < comms.size(); ++a) {
        control.barrier();
        comms[a]->reset_stats();
        const auto start = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) comms[a]->all_reduce(tensors[a]);
        const std::int64_t ns =
            std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now() - start).count();
        best[a] = std::min(best[a], max_over_ranks(control, ns) / iters);
        sent[a] = max_over_ranks(control, comms[a]->stats()[CommOp::all_reduce].bytes_sent / iters);
        std::int64_t crossed = cross_node_bytes(args.algorithms[a], count, n, r, args.ranks_per_node);
        if (auto* hier = dynamic_cast<myriad::distributed::HierarchicalCommunicator*>(comms[a].get())) {
          for (const auto& [role, stats] : hier->levels())
            if (role == "inter-node") crossed = stats.total().bytes_sent / iters;
        }
        cross[a] = max_over_ranks(control, crossed);
      }
    }
    if (r == 0) {
      std::vector<std::string> row = {std::to_string(count * 4)};
      std::size_t fastest = 0;
      for (std::size_t a = 0; a < comms.size(); ++a) {
        row.push_back(myriad::bench::fmt(static_cast<double>(best[a]) * 1e-3, 1));
        row.push_back(std::to_string(sent[a]));
        row.push_back(std::to_string(cross[a]));
        if (best[a] < best[fastest]) fastest = a;
      }
      row.push_back(args.algorithms[fastest]);
      table.add_row(row);
    }
  }
  if (r == 0) {
    std::cout << "## all_reduce algorithms (" << grouping.nodes << " simulated nodes x " << grouping.per_node
              << " ranks)\n\n";
    table.print();
    std::cout << "\ncheck: ok (every algorithm, every size, every rank); time = fastest of 5 interleaved rounds\n"
              << std::flush;
  }
}

}  // namespace

int main(int argc, char** argv) {
  myriad::distributed::MpiRuntime runtime(&argc, &argv);
  Args args;
  try {
    args = parse_args(argc, argv);
  } catch (const myriad::Error& e) {
    if (runtime.world_rank() == 0) std::cerr << "bench_collectives: " << e.message() << "\n";
    return 2;
  }
  {
    // The communicator under test, and a second one for the bookkeeping (barriers, maxima over
    // ranks) so that its statistics hold only the measured calls.
    std::unique_ptr<Communicator> comm = runtime.world();
    std::unique_ptr<Communicator> control = runtime.world();
    const int n = runtime.world_size();
    const int group = args.group_size > 0 ? args.group_size : n;
    if (group > n || n % group != 0) {
      if (runtime.world_rank() == 0)
        std::cerr << "bench_collectives: --group-size " << group << " must divide the " << n << " ranks\n";
      return 2;
    }
    if (group < n) comm = comm->split(runtime.world_rank() / group, runtime.world_rank(), "group");
    if (runtime.world_rank() == 0) {
      myriad::bench::print_header("bench_collectives", argc, argv);
      std::cout << "- nproc: " << std::thread::hardware_concurrency() << ", CPU: " << cpu_model() << "\n"
                << "- ranks: " << n
                << (group < n ? " in " + std::to_string(n / group) + " concurrent groups of " + std::to_string(group)
                              : std::string())
                << "\n"
                << "- transport: MPI (host)\n"
                << "- sizes: total buffer bytes (f32), as in nccl-tests; time = max over ranks of the mean per call\n\n"
                << std::flush;
    }
    // A failure on any rank (a fit the measured times do not allow, a profile that cannot be written)
    // ends the whole job with the reason, rank named, instead of std::terminate's abort on that rank.
    try {
      if (!args.profile.empty() && runtime.world_rank() == 0) myriad::bench::check_profile_writable(args.profile);
      if (!args.algorithms.empty()) {
        compare_algorithms(args, runtime, *control);
      } else {
        for (const std::string& op : args.ops) {
          std::vector<std::pair<double, double>> points = run_op(op, args, *comm, *control);
          if (op == "all_reduce" && !args.profile.empty() && runtime.world_rank() == 0)
            write_profile(args, points, n, group, argc, argv);
        }
      }
    } catch (const myriad::Error& e) {
      control->abort(1, "bench_collectives: " + e.message());
    }
  }
  return 0;
}
