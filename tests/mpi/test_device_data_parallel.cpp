// training.device cuda with data parallelism (train/device_trainer.h): each rank trains on its
// GPU and the gradients are summed over NCCL — all-reduced at ZeRO 0, reduce-scattered into
// shards with sharded AdamW moments and all-gathered values at ZeRO 1, and at ZeRO 2 every
// micro-batch from per-unit buffers (no flat gradients on the device), at ZeRO 3 with the values
// sharded too and gathered per unit; the loss curve and
// gradient norms must equal the CPU data-parallel engine's (same ZeRO stage, same global batch,
// 1e-4 relative). A ZeRO-1, 2 or 3 checkpoint written by the device run resumes in the CPU engine with
// bit-identical parameters and moment shards and the same next losses. Tensor parallelism (tp 2,
// and tp 2 x dp 2 with ZeRO 1 at np4) likewise, with a vocabulary whose padding falls unevenly
// over the shards. In myriad_mpi_tests it
// needs a GPU per rank (skips otherwise); myriad_emulated_mpi_tests runs it everywhere, with the
// CUDA layer emulated by the CPU ops and NCCL by MPI (tests/emulated_cuda).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "engine_test_support.h"
#include "myriad/core/local_device.h"
#include "myriad/cuda/device_context.h"
#include "myriad/train/engine.h"

namespace myriad::train {
namespace {

using namespace testing;

// Whether every rank has a GPU of its own; the same answer on every rank.
bool every_rank_has_a_gpu(dist::Communicator& comm) {
  std::int64_t ok = 1;
  try {
    select_local_device(local_rank_from_environment(), cuda::cuda_device_count_or_zero());
  } catch (const Error&) {
    ok = 0;
  }
  return dist::sum_over_ranks(comm, ok) == comm.size();
}

// A layout of the world's ranks: tp x dp (tp = world / dp), the ZeRO stage and the model family.
struct Layout {
  int tp = 1, zero_stage = 0;
  const char* architecture = "gpt2";
  bool sequence_parallel = false;
  int pp = 1, virtual_stages = 1;
  PipelineSchedule schedule = PipelineSchedule::one_f_one_b;
  Recompute recompute = Recompute::none;
  Precision precision = Precision::fp32;
};

// The CPU and device engines of one layout (gradient accumulation 2, the tiny model with head dim
// 64; vocabulary 330, padded to 384, so a tp 2 shard holds 138 real columns and 54 padding rows),
// sharing the dataset.
struct EnginePair {
  RunConfig cpu_config, gpu_config;
  dist::ProcessGroups cpu_groups, gpu_groups;
  Engine cpu, gpu;
  EnginePair(World& world, const fs::path& dir, Layout layout)
      : cpu_config(make_config(world, dir, layout, ComputeDevice::cpu)),
        gpu_config(make_config(world, dir, layout, ComputeDevice::cuda)),
        cpu_groups(grid(world, layout), world.runtime.world()),
        gpu_groups(grid(world, layout), world.runtime.world()),
        cpu(cpu_config, make_rank_logger(world.comm->rank(), "warn"), &cpu_groups),
        gpu(gpu_config, make_rank_logger(world.comm->rank(), "warn"), &gpu_groups) {}

  static dist::GridShape grid(World& world, Layout layout) {
    return dist::GridShape{.tp = layout.tp, .dp = world.comm->size() / (layout.tp * layout.pp), .pp = layout.pp};
  }

  static RunConfig make_config(World& world, const fs::path& dir, Layout layout, ComputeDevice device) {
    dist::Communicator& comm = *world.comm;
    RunConfig c = config_for(comm.rank(), dir, layout.architecture, comm.size() / (layout.tp * layout.pp),
                             layout.zero_stage, 2);
    c.parallel.tp = layout.tp;
    c.parallel.pp = layout.pp;
    c.parallel.pp_schedule = layout.schedule;
    c.parallel.virtual_stages = layout.virtual_stages;
    if (layout.virtual_stages > 1) c.model.n_layer = layout.pp * layout.virtual_stages;  // one layer per chunk
    c.parallel.sequence_parallel = layout.sequence_parallel;
    c.training.recompute = layout.recompute;
    c.training.precision = layout.precision;
    // Sequence parallel: 3 x 32 token rows split in halves, so a rank's rows start and end inside
    // a sequence (the position table is added in pieces).
    if (layout.sequence_parallel) c.training.micro_batch = 3;
    c.model.n_embd = 128;  // head dim 64 (DeviceGpt's flash attention)
    c.model.n_head = 2;
    if (std::string(layout.architecture) == "llama") c.model.n_kv_head = 2;  // tp 2: one of each per rank
    c.model.vocab_size = 330;
    c.training.device = device;
    c.checkpoint.dir = (dir / (device == ComputeDevice::cuda ? "checkpoints_cuda" : "checkpoints_cpu")).string();
    if (device == ComputeDevice::cpu) prepare_shared_data(comm, c);
    return c;
  }
};

bool same_bytes(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.raw_data(), b.raw_data(), a.nbytes()) == 0;
}

class DeviceDataParallel : public ::testing::TestWithParam<int> {};  // the ZeRO stage

TEST_P(DeviceDataParallel, MatchesTheCpuDataParallelEngine) {
  World world;
  dist::Communicator& comm = *world.comm;
  if (!every_rank_has_a_gpu(comm)) GTEST_SKIP() << "needs one GPU per rank";
  const fs::path dir = shared_dir(comm, "device_dp_zero" + std::to_string(GetParam()));
  EnginePair engines(world, dir, Layout{.zero_stage = GetParam()});
  for (int step = 0; step < 4; ++step) {
    const StepMetrics want = engines.cpu.step(), got = engines.gpu.step();
    EXPECT_NEAR(got.loss, want.loss, 1e-4 * want.loss) << "step " << step;
    EXPECT_NEAR(got.grad_norm, want.grad_norm, 1e-4 * want.grad_norm) << "step " << step;
    // The step metrics count the NCCL dp group's traffic: the CPU engine's buckets, the same
    // bytes; at ZeRO 3 fewer (the device keeps the units the backward starts with — the head's,
    // the tied embedding, the last block — from the forward instead of gathering them again).
    if (GetParam() < 3) {
      EXPECT_EQ(got.comm_bytes, want.comm_bytes) << "step " << step;
    } else {
      EXPECT_LT(got.comm_bytes, want.comm_bytes) << "step " << step;
      EXPECT_GT(got.comm_bytes, want.comm_bytes / 2) << "step " << step;
    }
  }
  EXPECT_NEAR(engines.gpu.evaluate(), engines.cpu.evaluate(), 1e-4 * engines.cpu.evaluate());
  // The device's gradient memory: full flat gradients at stages 0 and 1 (+ the shard at 1); from
  // stage 2 on only the shard, and unit buffers while they are being reduced; at stage 3 the
  // values likewise (the shard, and the units gathered).
  const MemoryReport memory = engines.gpu.memory_report();
  const std::int64_t full = 4 * engines.gpu.model().parameters().numel();
  const std::int64_t shard = (full + comm.size() - 1) / comm.size() + 4 * 16 * 8;  // + chunk padding
  if (GetParam() >= 2) {
    EXPECT_LE(memory.gradient_bytes, shard);
    EXPECT_GT(memory.comm_buffer_bytes, 0);
    EXPECT_LE(memory.comm_buffer_bytes, (GetParam() == 3 ? 2 : 1) * full + 4 * 1024);
    if (GetParam() == 3) EXPECT_LE(memory.parameter_bytes, shard);
    if (GetParam() == 2) EXPECT_GE(memory.parameter_bytes, full);
  } else {
    EXPECT_GE(memory.gradient_bytes, full);
    EXPECT_EQ(memory.comm_buffer_bytes, 0);
  }
}

INSTANTIATE_TEST_SUITE_P(Zero, DeviceDataParallel, ::testing::Values(0, 1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) { return "Stage" + std::to_string(info.param); });

// The parameter values this rank's optimizer updates, in its segment order: under ZeRO 3 the host
// keeps only this shard (no flat values).
Tensor optimizer_values(Engine& engine) {
  std::vector<float> values;
  for (const optim::OptimizerSegment& s : engine.optimizer().segments()) {
    const Tensor v = s.value.contiguous();
    values.insert(values.end(), v.data<float>(), v.data<float>() + v.numel());
  }
  Tensor out = Tensor::empty({static_cast<std::int64_t>(values.size())});
  std::copy(values.begin(), values.end(), out.data<float>());
  return out;
}

class DeviceDataParallelCheckpoint : public ::testing::TestWithParam<int> {};  // the ZeRO stage

TEST_P(DeviceDataParallelCheckpoint, ResumesInTheCpuEngineBitForBitAndOnTheDevice) {
  World world;
  dist::Communicator& comm = *world.comm;
  if (!every_rank_has_a_gpu(comm)) GTEST_SKIP() << "needs one GPU per rank";
  const fs::path dir = shared_dir(comm, "device_dp_zero" + std::to_string(GetParam()) + "_checkpoint");
  EnginePair engines(world, dir, Layout{.zero_stage = GetParam()});
  for (int step = 0; step < 3; ++step) engines.gpu.step();
  const std::string path = engines.gpu.save();
  dist::ProcessGroups groups(dist::GridShape{.dp = comm.size()}, world.runtime.world());
  Engine resumed(engines.cpu_config, make_rank_logger(comm.rank(), "warn"), &groups);
  resumed.load(path);
  EXPECT_EQ(resumed.step_count(), 3);
  if (GetParam() < 3) {
    EXPECT_TRUE(same_bytes(resumed.model().parameters().flat_values(), engines.gpu.model().parameters().flat_values()));
  }
  EXPECT_TRUE(same_bytes(optimizer_values(resumed), optimizer_values(engines.gpu)));
  // This rank's moment shard (the sharded optimizer's packed segments).
  EXPECT_TRUE(same_bytes(resumed.optimizer().m(), engines.gpu.optimizer().m()));
  EXPECT_TRUE(same_bytes(resumed.optimizer().v(), engines.gpu.optimizer().v()));
  EXPECT_EQ(resumed.optimizer().steps_taken(), 3);
  // A fresh device engine resumed from the same checkpoint (the host state uploaded into the
  // device's shards) takes the same steps as the device run that wrote it.
  dist::ProcessGroups gpu_groups(dist::GridShape{.dp = comm.size()}, world.runtime.world());
  Engine gpu_resumed(engines.gpu_config, make_rank_logger(comm.rank(), "warn"), &gpu_groups);
  gpu_resumed.load(path);
  for (int step = 0; step < 2; ++step) {
    const StepMetrics want = resumed.step(), got = engines.gpu.step(), again = gpu_resumed.step();
    EXPECT_NEAR(got.loss, want.loss, 1e-4 * want.loss) << "resumed step " << step;
    EXPECT_EQ(again.loss, got.loss) << "device resumed step " << step;
    EXPECT_EQ(again.grad_norm, got.grad_norm) << "device resumed step " << step;
  }
}

INSTANTIATE_TEST_SUITE_P(Zero, DeviceDataParallelCheckpoint, ::testing::Values(1, 2, 3),
                         [](const ::testing::TestParamInfo<int>& info) { return "Stage" + std::to_string(info.param); });

// ZeRO 3 with bf16 GEMM operands, which only the device runs (the CPU engine keeps no 16-bit copy
// of gathered shards): the same losses and gradient norms as the device engine at ZeRO 1 in bf16
// (1e-4 relative; the two differ only in the order the micro-batches' gradients are summed).
TEST(DeviceDataParallelBf16, Zero3MatchesZero1OnTheDevice) {
  World world;
  dist::Communicator& comm = *world.comm;
  if (!every_rank_has_a_gpu(comm)) GTEST_SKIP() << "needs one GPU per rank";
  const fs::path dir = shared_dir(comm, "device_dp_bf16_zero3");
  EnginePair zero1(world, dir, Layout{.zero_stage = 1, .precision = Precision::bf16});
  dist::ProcessGroups groups(EnginePair::grid(world, Layout{}), world.runtime.world());
  Engine zero3(EnginePair::make_config(world, dir, Layout{.zero_stage = 3, .precision = Precision::bf16},
                                       ComputeDevice::cuda),
               make_rank_logger(comm.rank(), "warn"), &groups);
  for (int step = 0; step < 3; ++step) {
    const StepMetrics want = zero1.gpu.step(), got = zero3.step();
    EXPECT_NEAR(got.loss, want.loss, 1e-4 * want.loss) << "step " << step;
    EXPECT_NEAR(got.grad_norm, want.grad_norm, 1e-4 * want.grad_norm) << "step " << step;
  }
  EXPECT_NEAR(zero3.evaluate(), zero1.gpu.evaluate(), 1e-4 * zero1.gpu.evaluate());
}

// 3 steps of the device and CPU engines of `layout`: same losses and gradient norms (1e-4
// relative), same validation loss; then the device run's checkpoint loaded by a CPU engine has
// bit-identical parameters and moments (this rank's shard) and takes the same next step.
void expect_matches_the_cpu_engine_and_resumes_there(World& world, const fs::path& dir, const Layout& layout) {
  dist::Communicator& comm = *world.comm;
  EnginePair engines(world, dir, layout);
  for (int step = 0; step < 3; ++step) {
    const StepMetrics want = engines.cpu.step(), got = engines.gpu.step();
    EXPECT_NEAR(got.loss, want.loss, 1e-4 * want.loss) << "step " << step;
    EXPECT_NEAR(got.grad_norm, want.grad_norm, 1e-4 * want.grad_norm) << "step " << step;
  }
  EXPECT_NEAR(engines.gpu.evaluate(), engines.cpu.evaluate(), 1e-4 * engines.cpu.evaluate());
  const std::string path = engines.gpu.save();
  dist::ProcessGroups groups(EnginePair::grid(world, layout), world.runtime.world());
  Engine resumed(engines.cpu_config, make_rank_logger(comm.rank(), "warn"), &groups);
  resumed.load(path);
  if (layout.zero_stage < 3) {  // ZeRO 3 keeps only the shard: compared through the optimizer's values
    EXPECT_TRUE(same_bytes(resumed.model().parameters().flat_values(), engines.gpu.model().parameters().flat_values()));
  }
  EXPECT_TRUE(same_bytes(optimizer_values(resumed), optimizer_values(engines.gpu)));
  EXPECT_TRUE(same_bytes(resumed.optimizer().m(), engines.gpu.optimizer().m()));
  EXPECT_TRUE(same_bytes(resumed.optimizer().v(), engines.gpu.optimizer().v()));
  const StepMetrics want = resumed.step(), got = engines.gpu.step();
  EXPECT_NEAR(got.loss, want.loss, 1e-4 * want.loss) << "resumed";
}

// Tensor parallelism on the device (np2: tp 2, GPT-2 and LLaMA-style, with and without sequence
// parallelism; np4: the same at tp 2 x dp 2 with ZeRO 1, one case with ZeRO 2 and one with ZeRO 3
// — at np2 those are tp 2 at ZeRO 2 / 3 over one dp rank): the same curve and gradient norms as the CPU engine
// of the same layout, and a checkpoint of the device run that the CPU engine resumes with
// bit-identical shards.
struct TpCase {
  const char* architecture;
  bool sequence_parallel;
  Recompute recompute = Recompute::none;
  int zero_stage = 1;  // with dp > 1 (0 otherwise, unless 2 or 3)
};
class DeviceTensorParallel : public ::testing::TestWithParam<TpCase> {};

TEST_P(DeviceTensorParallel, MatchesTheCpuEngineAndResumesThere) {
  World world;
  dist::Communicator& comm = *world.comm;
  if (!every_rank_has_a_gpu(comm)) GTEST_SKIP() << "needs one GPU per rank";
  if (comm.size() % 2 != 0) GTEST_SKIP() << "tp 2 needs an even world";
  const TpCase c = GetParam();
  const int zero_stage = c.zero_stage >= 2 ? c.zero_stage : comm.size() > 2 ? c.zero_stage : 0;
  const Layout layout{.tp = 2, .zero_stage = zero_stage, .architecture = c.architecture,
                      .sequence_parallel = c.sequence_parallel, .recompute = c.recompute};
  const fs::path dir = shared_dir(comm, std::string("device_tp_") + c.architecture + (c.sequence_parallel ? "_sp" : "") +
                                            std::string(choice_name(c.recompute)) + "_zero" +
                                            std::to_string(zero_stage));
  expect_matches_the_cpu_engine_and_resumes_there(world, dir, layout);
}

INSTANTIATE_TEST_SUITE_P(Families, DeviceTensorParallel,
                         ::testing::Values(TpCase{"gpt2", false}, TpCase{"llama", false}, TpCase{"gpt2", true},
                                           TpCase{"llama", true}, TpCase{"gpt2", true, Recompute::full},
                                           TpCase{"llama", true, Recompute::none, 2},
                                           TpCase{"gpt2", false, Recompute::selective, 3}),
                         [](const ::testing::TestParamInfo<TpCase>& info) {
                           return std::string(info.param.architecture) + (info.param.sequence_parallel ? "_sp" : "") +
                                  (info.param.recompute == Recompute::full ? "_recompute" : "") +
                                  (info.param.recompute == Recompute::selective ? "_selective" : "") +
                                  (info.param.zero_stage >= 2 ? "_zero" + std::to_string(info.param.zero_stage) : "");
                         });

// Pipeline parallelism on the device (np2: pp 2 — GPT-2 with its tied embedding split between
// the first and last stage under 1F1B, LLaMA-style under GPipe, GPT-2 interleaved with two
// chunks per rank; np4: the same with dp 2 — ZeRO 1, and ZeRO 0 for GPipe — and pp 2 x tp 2 with
// GPT-2's vocabulary-parallel tied embedding on both end stages): the same curve and gradient norms as the
// CPU engine of the same layout, validation through the stages, and a checkpoint of the device
// run that the CPU engine resumes with bit-identical parameters and moments.
struct PpCase {
  const char* name;
  const char* architecture;
  PipelineSchedule schedule;
  int virtual_stages;
  int zero_stage_with_dp;  // when dp > 1
  int tp = 1;
  Recompute recompute = Recompute::none;
};
class DevicePipelineParallel : public ::testing::TestWithParam<PpCase> {};

TEST_P(DevicePipelineParallel, MatchesTheCpuEngineAndResumesThere) {
  World world;
  dist::Communicator& comm = *world.comm;
  if (!every_rank_has_a_gpu(comm)) GTEST_SKIP() << "needs one GPU per rank";
  const PpCase c = GetParam();
  if (comm.size() % (2 * c.tp) != 0) GTEST_SKIP() << "pp 2 x tp " << c.tp << " does not divide the world";
  const bool data_parallel = comm.size() > 2 * c.tp;
  const Layout layout{.tp = c.tp, .zero_stage = data_parallel ? c.zero_stage_with_dp : 0,
                      .architecture = c.architecture, .pp = 2, .virtual_stages = c.virtual_stages,
                      .schedule = c.schedule, .recompute = c.recompute};
  const fs::path dir = shared_dir(comm, std::string("device_pp_") + c.name);
  expect_matches_the_cpu_engine_and_resumes_there(world, dir, layout);
}

INSTANTIATE_TEST_SUITE_P(Schedules, DevicePipelineParallel,
                         ::testing::Values(PpCase{"gpt2_1f1b", "gpt2", PipelineSchedule::one_f_one_b, 1, 1},
                                           PpCase{"llama_gpipe", "llama", PipelineSchedule::gpipe, 1, 0},
                                           PpCase{"gpt2_interleaved", "gpt2", PipelineSchedule::interleaved, 2, 1, 1,
                                                  Recompute::selective},
                                           PpCase{"gpt2_tp2_1f1b", "gpt2", PipelineSchedule::one_f_one_b, 1, 1, 2}),
                         [](const ::testing::TestParamInfo<PpCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace myriad::train
