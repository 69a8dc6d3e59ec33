// training.device cuda with data parallelism (train/device_trainer.h): each rank trains on its
// GPU and the gradients are summed over NCCL; the loss curve and gradient norms must equal the
// CPU data-parallel engine's on the same global batch (1e-4 relative). In myriad_mpi_tests it
// needs a GPU per rank (skips otherwise); myriad_emulated_mpi_tests runs it everywhere, with the
// CUDA layer emulated by the CPU ops and NCCL by MPI (tests/emulated_cuda).
#include <gtest/gtest.h>

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

TEST(DeviceDataParallel, MatchesTheCpuDataParallelEngine) {
  World world;
  dist::Communicator& comm = *world.comm;
  if (!every_rank_has_a_gpu(comm)) GTEST_SKIP() << "needs one GPU per rank";
  const int n = comm.size();
  const fs::path dir = shared_dir(comm, "device_dp");
  RunConfig cpu_config = config_for(comm.rank(), dir, "gpt2", n, 0, 2);
  cpu_config.model.n_embd = 128;  // head dim 64 (DeviceGpt's flash attention)
  cpu_config.model.n_head = 2;
  prepare_shared_data(comm, cpu_config);
  RunConfig gpu_config = cpu_config;
  gpu_config.training.device = ComputeDevice::cuda;

  dist::ProcessGroups cpu_groups(dist::GridShape{.dp = n}, world.runtime.world());
  Engine cpu(cpu_config, make_rank_logger(comm.rank(), "warn"), &cpu_groups);
  dist::ProcessGroups gpu_groups(dist::GridShape{.dp = n}, world.runtime.world());
  Engine gpu(gpu_config, make_rank_logger(comm.rank(), "warn"), &gpu_groups);
  for (int step = 0; step < 4; ++step) {
    const StepMetrics want = cpu.step(), got = gpu.step();
    EXPECT_NEAR(got.loss, want.loss, 1e-4 * want.loss) << "step " << step;
    EXPECT_NEAR(got.grad_norm, want.grad_norm, 1e-4 * want.grad_norm) << "step " << step;
  }
  EXPECT_NEAR(gpu.evaluate(), cpu.evaluate(), 1e-4 * cpu.evaluate());
}

}  // namespace
}  // namespace myriad::train
