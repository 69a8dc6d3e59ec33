// How often a training step on training.device cuda makes the host wait for the GPU, at the
// layouts over NCCL (emulated: tests/emulated_cuda counts every device→host synchronisation,
// NcclWork::wait's loops included). Inside forward and backward nothing may wait: a wait stalls
// the host's launch queue and the GPU idles; the step reads its results after the backward pass
// (the gradient norm the update needs, the loss). Only in myriad_emulated_mpi_tests.
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>
#include <ostream>
#include <string>

#include "emulated_streams.h"
#include "engine_test_support.h"
#include "myriad/train/engine.h"

namespace myriad::train {
namespace {

using namespace testing;

struct SyncCase {
  const char* name;
  int tp = 1, zero_stage = 0;
  bool sequence_parallel = false;
  int cp = 1;
};
void PrintTo(const SyncCase& c, std::ostream* out) { *out << c.name; }

class DeviceStepSynchronisations : public ::testing::TestWithParam<SyncCase> {};

TEST_P(DeviceStepSynchronisations, NoWaitInsideForwardAndBackward) {
  World world;
  distributed::Communicator& comm = *world.comm;
  const SyncCase c = GetParam();
  if (comm.size() % (c.tp * c.cp) != 0) GTEST_SKIP() << "tp x cp does not divide the world";
  const int dp = comm.size() / (c.tp * c.cp);
  const fs::path dir = shared_dir(comm, std::string("device_sync_") + c.name);
  RunConfig config = config_for(comm.rank(), dir, "gpt2", dp, c.zero_stage, 2);
  config.parallel.tp = c.tp;
  config.parallel.sequence_parallel = c.sequence_parallel;
  config.parallel.cp = c.cp;
  if (c.sequence_parallel) config.training.micro_batch = 3;
  config.model.n_embd = 128;
  config.model.n_head = 2;
  config.model.vocab_size = 330;
  config.training.device = ComputeDevice::cuda;
  prepare_shared_data(comm, config);
  distributed::ProcessGroups groups(distributed::GridShape{.tp = c.tp, .cp = c.cp, .dp = dp}, world.runtime.world());
  Engine engine(config, make_rank_logger(comm.rank(), "warn"), &groups);
  (void)engine.step();  // buffers, plans and the pinned upload ring settle
  std::uint64_t at_update = 0;
  engine.set_before_update([&at_update] { at_update = emulated::host_synchronizations(); });
  const std::uint64_t start = emulated::host_synchronizations();
  (void)engine.step();
  const std::uint64_t end = emulated::host_synchronizations();
  std::cout << "[ sync ] " << c.name << " rank " << comm.rank() << ": forward+backward " << at_update - start
            << ", update+metrics " << end - at_update << "\n";
  EXPECT_EQ(at_update - start, 0u) << "host waits inside forward/backward (MYRIAD_EMULATED_SYNC_TRACE=1 shows where)";
  // The update's reads: the gradient norms (one transfer), then the loss (one transfer).
  EXPECT_LE(end - at_update, 2u) << "host waits in the update and the metrics";
}

INSTANTIATE_TEST_SUITE_P(Layouts, DeviceStepSynchronisations,
                         ::testing::Values(SyncCase{"dp_zero0"}, SyncCase{"dp_zero1", 1, 1}, SyncCase{"dp_zero2", 1, 2},
                                           SyncCase{"dp_zero3", 1, 3}, SyncCase{"tp2", 2},
                                           SyncCase{"tp2_sp", 2, 0, true}, SyncCase{"cp2", 1, 0, false, 2}),
                         [](const ::testing::TestParamInfo<SyncCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace myriad::train
