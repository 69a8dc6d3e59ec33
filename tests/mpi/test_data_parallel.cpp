// Data parallelism equals serial (run under mpiexec with N ranks): for every ZeRO stage, dp = N
// reproduces the loss curve of one process on the same global batch over 20 steps; the bytes each
// rank sends per step equal the analytic volume of the ring algorithms; optimizer state and the
// memory report follow the ZeRO formulas; a checkpoint saved under dp = N resumes in one process.
//
// Tolerance: the only difference between the runs is the float32 summation order of gradients
// (N partial sums added in ring order instead of one accumulation), ~1e-7 relative per element.
// AdamW divides by sqrt(v), so such a perturbation moves each update by about the same relative
// amount; over 20 steps the loss curves measured here agree to < 1e-7 (printed by the test; 2 and
// 4 ranks, every stage). We allow 1e-4 absolute: room for other BLAS builds and thread counts,
// still far below the difference a wrong batch or initialisation produces (checked: a run on
// another seed differs by > 1e-2 at some step, so the comparison can fail).
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "myriad/core/logging.h"
#include "myriad/distributed/mpi_runtime.h"
#include "myriad/distributed/process_groups.h"
#include "myriad/distributed/scalar_reduce.h"
#include "myriad/ops/cpu_gemm.h"
#include "myriad/train/config_wiring.h"
#include "myriad/train/engine.h"
#include "myriad/train/data/prepared_data.h"
#include "engine_test_support.h"

namespace fs = std::filesystem;

namespace myriad::train {
namespace {

using namespace testing;

constexpr int kSteps = 20;
constexpr int kAccumulation = 2;  // per dp rank
constexpr double kLossTolerance = 1e-4;

struct Curve {
  std::vector<double> loss, grad_norm;
  std::vector<std::int64_t> comm_bytes;
  double val_loss = 0.0;
};

Curve run(Engine& engine) {
  Curve c;
  for (int s = 0; s < kSteps; ++s) {
    StepMetrics m = engine.step();
    c.loss.push_back(m.loss);
    c.grad_norm.push_back(m.grad_norm);
    c.comm_bytes.push_back(m.comm_bytes);
  }
  c.val_loss = engine.evaluate();
  return c;
}

// The serial reference: one process (a world of one), the same global batch.
Curve serial_curve(distributed::Communicator& comm, const fs::path& dir, const std::string& architecture,
                   std::uint64_t seed = 1337) {
  RunConfig config = config_for(comm.rank(), dir, architecture, 1, 0, kAccumulation * comm.size());
  config.training.seed = seed;
  Engine engine(config, make_rank_logger(0, "warn"));
  return run(engine);
}

distributed::GridShape dp_grid(int n) { return distributed::GridShape{.dp = n}; }

double max_abs_difference(const std::vector<double>& a, const std::vector<double>& b) {
  double worst = 0.0;
  for (std::size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::abs(a[i] - b[i]));
  return worst;
}

// Bytes one rank sends per step: ring all-reduce 2(N-1)/N, reduce-scatter and all-gather (N-1)/N
// of the buffer, for the collectives each stage issues (f32, 4 bytes per element).
double analytic_step_bytes(Engine& engine, int stage, int n) {
  const double psi = static_cast<double>(engine.model().parameters().numel()) * 4.0;
  const double ring = (n - 1.0) / n;
  const auto& units = engine.model().units();
  switch (stage) {
    case 0:
      return 2.0 * ring * psi;  // all-reduce once, last micro-batch only
    case 1:
      return ring * psi + ring * psi;  // reduce-scatter once + all-gather values
    case 2:
      return kAccumulation * ring * psi + ring * psi;  // reduce-scatter every micro-batch + all-gather
    default: {
      // Per micro-batch: forward gathers every unit; backward gathers every unit again except the
      // embeddings when untied (their backward only writes gradients); reduce-scatter everything.
      double unit0 = static_cast<double>(units[0].size()) * 4.0;
      double backward = engine.model().config().tie_embeddings ? psi : psi - unit0;
      return kAccumulation * ring * (psi + backward + psi);
    }
  }
}

class DataParallelStages : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(DataParallelStages, ReproducesTheSerialLossCurveWithAnalyticTraffic) {
  const auto& [architecture, stage] = GetParam();
  World world;
  distributed::Communicator& comm = *world.comm;
  const int n = comm.size();
  fs::path dir = shared_dir(comm, architecture + "_zero" + std::to_string(stage));
  prepare_shared_data(comm, config_for(comm.rank(), dir, architecture, n, stage, kAccumulation));
  Curve serial = serial_curve(comm, dir, architecture);

  distributed::ProcessGroups groups(dp_grid(n), world.runtime.world());
  Engine engine(config_for(comm.rank(), dir, architecture, n, stage, kAccumulation),
                make_rank_logger(comm.rank(), "warn"), &groups);
  Curve parallel = run(engine);

  const double loss_gap = max_abs_difference(serial.loss, parallel.loss);
  if (comm.rank() == 0) {
    std::cout << architecture << " dp " << n << " ZeRO " << stage << ": loss " << serial.loss.front() << " -> "
              << serial.loss.back() << ", max |serial - parallel| = " << loss_gap << ", val " << serial.val_loss
              << " vs " << parallel.val_loss << std::endl;
  }
  EXPECT_LT(loss_gap, kLossTolerance);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(parallel.grad_norm[s], serial.grad_norm[s], 1e-4 * serial.grad_norm[s] + 1e-6) << "step " << s + 1;
  }
  EXPECT_NEAR(parallel.val_loss, serial.val_loss, kLossTolerance);
  EXPECT_LT(serial.loss.back(), serial.loss.front() - 0.5)
      << "the run must actually learn for the curve to mean something";

  // Traffic: every step sends the analytic volume (scalars for the token count, loss and norm
  // add a few dozen bytes, far inside 1 %).
  const double expected = analytic_step_bytes(engine, stage, n);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(static_cast<double>(parallel.comm_bytes[s]), expected, 0.01 * expected)
        << "step " << s + 1 << " on rank " << comm.rank();
  }
}

INSTANTIATE_TEST_SUITE_P(Stages, DataParallelStages,
                         ::testing::Values(std::tuple{std::string("gpt2"), 0}, std::tuple{std::string("gpt2"), 1},
                                           std::tuple{std::string("gpt2"), 2}, std::tuple{std::string("gpt2"), 3},
                                           std::tuple{std::string("llama"), 2}, std::tuple{std::string("llama"), 3}),
                         [](const auto& info) {
                           return std::get<0>(info.param) + "_zero" + std::to_string(std::get<1>(info.param));
                         });

// parallel.dp_reduce: tree and hierarchical reductions (ranks grouped into two simulated nodes)
// reproduce the serial curve like the ring does, with the bytes their algorithms send.
class DataParallelReduction : public ::testing::TestWithParam<std::tuple<std::string, int>> {};

TEST_P(DataParallelReduction, ReproducesTheSerialLossCurve) {
  const auto& [algorithm, stage] = GetParam();
  World world;
  distributed::Communicator& comm = *world.comm;
  const int n = comm.size();
  fs::path dir = shared_dir(comm, "reduce_" + algorithm + std::to_string(stage));
  RunConfig config = config_for(comm.rank(), dir, "gpt2", n, stage, kAccumulation);
  config.apply_override("parallel.dp_reduce=" + algorithm);
  config.parallel.ranks_per_node = n / 2;
  prepare_shared_data(comm, config);
  Curve serial = serial_curve(comm, dir, "gpt2");

  distributed::ProcessGroups groups(dp_grid(n), world.runtime.world(), reduction_options(config.parallel));
  const std::string expected_name =
      algorithm == "tree" ? "tree" : "hierarchical (2 nodes x " + std::to_string(n / 2) + ")";
  EXPECT_EQ(groups.reduction(), expected_name);
  Engine engine(config, make_rank_logger(comm.rank(), "warn"), &groups);
  Curve parallel = run(engine);
  const double loss_gap = max_abs_difference(serial.loss, parallel.loss);
  if (comm.rank() == 0) {
    std::cout << groups.reduction() << " dp " << n << " ZeRO " << stage << ": max |serial - parallel| = " << loss_gap
              << std::endl;
  }
  EXPECT_LT(loss_gap, kLossTolerance);
  EXPECT_NEAR(parallel.val_loss, serial.val_loss, kLossTolerance);
  if (algorithm == "hierarchical") {
    // Intra-node 2S(L-1)/L plus inter-node 2S(N-1)/(NL) per all-reduce equals the ring's
    // 2S(P-1)/P in total (it is where the bytes go that changes), so the analytic volume holds.
    const double expected = analytic_step_bytes(engine, stage, n);
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_NEAR(static_cast<double>(parallel.comm_bytes[s]), expected, 0.01 * expected) << "step " << s + 1;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(
    Algorithms, DataParallelReduction,
    ::testing::Values(std::tuple{std::string("hierarchical"), 0}, std::tuple{std::string("hierarchical"), 1},
                      std::tuple{std::string("hierarchical"), 3}, std::tuple{std::string("tree"), 0}),
    [](const auto& info) { return std::get<0>(info.param) + "_zero" + std::to_string(std::get<1>(info.param)); });

// parallel.dp_reduce_exact: the ring, the tree and two simulated nodes give the same loss curve
// bit for bit (ZeRO 1: reduce-scatter of the gradients, all-gather of the values), within the
// serial tolerance of the one-process run.
TEST(DataParallel, ExactSumsGiveTheSameCurveBitsForEveryAlgorithm) {
  World world;
  distributed::Communicator& comm = *world.comm;
  const int n = comm.size();
  fs::path dir = shared_dir(comm, "reduce_exact");
  RunConfig base = config_for(comm.rank(), dir, "gpt2", n, 1, kAccumulation);
  prepare_shared_data(comm, base);
  const Curve serial = serial_curve(comm, dir, "gpt2");
  Curve first;
  std::string first_name;
  for (const char* algorithm : {"ring", "hierarchical", "tree"}) {
    RunConfig config = base;
    config.apply_override(std::string("parallel.dp_reduce=") + algorithm);
    config.apply_override("parallel.dp_reduce_exact=true");
    config.parallel.ranks_per_node = n / 2;
    distributed::ProcessGroups groups(dp_grid(n), world.runtime.world(), reduction_options(config.parallel));
    EXPECT_NE(groups.reduction().find(", exact sums"), std::string::npos) << groups.reduction();
    Engine engine(config, make_rank_logger(comm.rank(), "warn"), &groups);
    const Curve curve = run(engine);
    EXPECT_LT(max_abs_difference(serial.loss, curve.loss), kLossTolerance) << groups.reduction();
    if (first_name.empty()) {
      first = curve;
      first_name = groups.reduction();
      continue;
    }
    for (int s = 0; s < kSteps; ++s) {
      EXPECT_EQ(curve.loss[s], first.loss[s]) << groups.reduction() << " vs " << first_name << ", step " << s + 1;
    }
    EXPECT_EQ(curve.val_loss, first.val_loss) << groups.reduction() << " vs " << first_name;
  }
}

// ZeRO-3 under bf16 gathers 16-bit values: the same curve as ZeRO 0 under bf16 (both round the
// parameters to bf16 for compute), with the gathers' bytes halved.
TEST(DataParallel, Zero3Bf16GathersSixteenBitValues) {
  World world;
  distributed::Communicator& comm = *world.comm;
  const int n = comm.size();
  fs::path dir = shared_dir(comm, "zero3_bf16");
  auto bf16_config = [&](int stage) {
    RunConfig c = config_for(comm.rank(), dir, "gpt2", n, stage, kAccumulation);
    c.training.precision = Precision::bf16;
    return c;
  };
  prepare_shared_data(comm, bf16_config(0));
  auto curve = [&](int stage, Curve& out, double& psi, double& backward) {
    distributed::ProcessGroups groups(dp_grid(n), world.runtime.world());
    Engine engine(bf16_config(stage), make_rank_logger(comm.rank(), "warn"), &groups);
    out = run(engine);
    psi = static_cast<double>(engine.model().parameters().numel());
    backward = engine.model().config().tie_embeddings ? psi : psi - engine.model().units()[0].size();
  };
  Curve zero0, zero3;
  double psi = 0, backward = 0;
  curve(0, zero0, psi, backward);
  curve(3, zero3, psi, backward);
  const double gap = max_abs_difference(zero0.loss, zero3.loss);
  if (comm.rank() == 0) std::cout << "bf16 ZeRO 0 vs ZeRO 3: max |loss difference| = " << gap << std::endl;
  EXPECT_LT(gap, 1e-3);  // the same bf16 values; only f32 summation order differs
  // Per micro-batch: gathers of 2-byte values (forward + backward), reduce-scatter of f32 grads.
  const double ring = (n - 1.0) / n;
  const double expected = kAccumulation * ring * (2.0 * (psi + backward) + 4.0 * psi);
  for (int s = 0; s < kSteps; ++s) {
    EXPECT_NEAR(static_cast<double>(zero3.comm_bytes[s]), expected, 0.01 * expected) << "step " << s + 1;
  }
}

// training.cpu_gemm measured under dp = N: every rank times its first step's GEMM shapes, and all
// install one plan (rank 0's merge); the curve still equals serial's within the tolerance above.
TEST(DataParallel, MeasuredCpuGemmPlanIsOnePlanOnEveryRank) {
  World world;
  distributed::Communicator& comm = *world.comm;
  const int n = comm.size();
  fs::path dir = shared_dir(comm, "cpu_gemm_measured");
  RunConfig config = config_for(comm.rank(), dir, "gpt2", n, 1, kAccumulation);
  prepare_shared_data(comm, config);
  const Curve serial = serial_curve(comm, dir, "gpt2");
  config.apply_override("training.cpu_gemm=measured");
  ::setenv("MYRIAD_CPU_GEMM_CACHE", "off", 1);  // each rank times its shapes: none come from a machine cache
  distributed::ProcessGroups groups(dp_grid(n), world.runtime.world());
  Engine engine(config, make_rank_logger(comm.rank(), "warn"), &groups);
  EXPECT_EQ(cpu::gemm_plan(), nullptr) << "a plan before the first step";
  const Curve curve = run(engine);
  ASSERT_NE(cpu::gemm_plan(), nullptr);
  const std::string text = cpu::gemm_plan()->to_text();
  EXPECT_FALSE(text.empty());
  const std::vector<std::string> texts = distributed::gather_strings_to_rank0(comm, text);
  for (std::size_t r = 1; r < texts.size(); ++r) EXPECT_EQ(texts[r], texts[0]) << "rank " << r << "'s plan";
  EXPECT_LT(max_abs_difference(serial.loss, curve.loss), kLossTolerance);
}

TEST(DataParallel, TheComparisonCanFail) {
  // Another seed gives another batch and initialisation: the curves must differ by far more than
  // the tolerance, otherwise the equivalence test above would prove nothing.
  World world;
  distributed::Communicator& comm = *world.comm;
  fs::path dir = shared_dir(comm, "can_fail");
  prepare_shared_data(comm, config_for(comm.rank(), dir, "gpt2", comm.size(), 0, kAccumulation));
  Curve a = serial_curve(comm, dir, "gpt2", 1337), b = serial_curve(comm, dir, "gpt2", 1338);
  EXPECT_GT(max_abs_difference(a.loss, b.loss), 100 * kLossTolerance);
}

TEST(DataParallel, OptimizerStateAndMemoryFollowTheZeroFormulas) {
  World world;
  distributed::Communicator& comm = *world.comm;
  const int n = comm.size();
  fs::path dir = shared_dir(comm, "memory");
  auto deep = [&](int dp, int stage, int accumulation) {
    RunConfig c = config_for(comm.rank(), dir, "gpt2", dp, stage, accumulation);
    c.model.n_layer = 16;  // many units, so that a few transient units are much less than the model
    return c;
  };
  prepare_shared_data(comm, deep(n, 0, kAccumulation));
  Engine serial(deep(1, 0, kAccumulation * n), make_rank_logger(0, "warn"));
  const MemoryReport one = serial.memory_report();
  const std::int64_t psi = serial.model().parameters().numel();
  std::int64_t largest_unit = 0;
  for (const nn::ParamUnit& u : serial.model().units()) largest_unit = std::max(largest_unit, u.size());
  for (int stage = 0; stage <= 3; ++stage) {
    distributed::ProcessGroups groups(dp_grid(n), world.runtime.world());
    Engine engine(deep(n, stage, kAccumulation), make_rank_logger(comm.rank(), "warn"), &groups);
    const std::int64_t shard = engine.data_parallel().layout().shard_elements();
    // The shards of all ranks partition the flat buffer.
    if (stage >= 1) EXPECT_EQ(distributed::sum_over_ranks(comm, shard), psi);
    const MemoryReport r = engine.memory_report();
    parallel::ShardedMemory f = parallel::DataParallel::formula(psi, shard, stage);
    EXPECT_EQ(r.parameter_bytes, f.parameter_bytes) << "stage " << stage;
    EXPECT_EQ(r.gradient_bytes, f.gradient_bytes) << "stage " << stage;
    // Optimizer state covers the owned elements minus the alignment padding between parameters.
    EXPECT_LE(r.optimizer_bytes, f.optimizer_bytes);
    EXPECT_GT(r.optimizer_bytes, 0.97 * f.optimizer_bytes);
    if (stage >= 1) {
      const double ratio = static_cast<double>(r.optimizer_bytes) / static_cast<double>(one.optimizer_bytes);
      EXPECT_NEAR(ratio, 1.0 / n, 0.03) << "stage " << stage << " optimizer state per rank vs serial";
    } else {
      EXPECT_EQ(r.optimizer_bytes, one.optimizer_bytes);
    }
    if (stage == 3) {
      EXPECT_NEAR(static_cast<double>(r.parameter_bytes) / static_cast<double>(one.parameter_bytes), 1.0 / n, 0.01);
    }
    // Transient buffers after a step: stage 2 holds at most 2 reductions in flight plus the unit
    // being differentiated and the tied embeddings (each with its reduced chunk); stage 3 adds
    // gathered values of the current, the prefetched and the embedding unit.
    engine.step();
    const std::int64_t peak = engine.memory_report().comm_buffer_bytes;
    const double unit_bytes = 4.0 * static_cast<double>(largest_unit) * (1.0 + 1.0 / n);
    if (stage == 2) EXPECT_LE(static_cast<double>(peak), 4 * unit_bytes);
    if (stage == 3) EXPECT_LE(static_cast<double>(peak), 7 * unit_bytes);
    if (stage >= 2) {
      EXPECT_LT(peak, psi * 4) << "stage " << stage << ": transient buffers must stay below one full gradient";
      std::cout << "stage " << stage << " transient peak " << peak << " B vs full gradients " << psi * 4 << " B"
                << std::endl;
    }
  }
}

TEST(DataParallel, CheckpointFromZero3ResumesInOneProcess) {
  World world;
  distributed::Communicator& comm = *world.comm;
  const int n = comm.size();
  fs::path dir = shared_dir(comm, "resume");
  prepare_shared_data(comm, config_for(comm.rank(), dir, "gpt2", n, 3, kAccumulation));
  distributed::ProcessGroups groups(dp_grid(n), world.runtime.world());
  Engine parallel(config_for(comm.rank(), dir, "gpt2", n, 3, kAccumulation), make_rank_logger(comm.rank(), "warn"),
                  &groups);
  for (int s = 0; s < 5; ++s) parallel.step();
  const fs::path written = parallel.save();
  // ZeRO-3: every dp rank writes its own shard (values and AdamW moments) — nothing is gathered.
  for (int r = 0; r < n; ++r) EXPECT_TRUE(fs::exists(written / ("rank_" + std::to_string(r) + ".bin"))) << r;
  std::vector<double> continued;
  continued.reserve(3);
  for (int s = 0; s < 3; ++s) continued.push_back(parallel.step().loss);
  comm.barrier();
  RunConfig serial_config = config_for(comm.rank(), dir, "gpt2", 1, 0, kAccumulation * n);
  serial_config.checkpoint.dir = (dir / "checkpoints").string();
  Engine serial(serial_config, make_rank_logger(0, "warn"));
  serial.load("auto");
  EXPECT_EQ(serial.step_count(), 5);
  for (int s = 0; s < 3; ++s) EXPECT_NEAR(serial.step().loss, continued[static_cast<std::size_t>(s)], kLossTolerance);
}

}  // namespace
}  // namespace myriad::train
