// How often a training step on training.device cuda makes the host wait for the GPU, at the
// layouts over NCCL (emulated: tests/emulated_cuda counts every device→host synchronisation,
// NcclWork::wait's loops included). Inside forward and backward nothing may wait: a wait stalls
// the host's launch queue and the GPU idles; the step reads its results after the backward pass
// (the gradient norm the update needs, the loss, the MoE totals). An MoE layer routes on the
// device; with a capacity its rows are padded to sizes the host knows, so it waits for nothing;
// dropless it reads one count vector per layer and micro-batch (ops/moe_routing.h, moe_layer.h).
// The compressed exchanges (int8, top-k after the backward; 1-bit Adam's momentum sum in the
// update) add no wait; nor does block-sparse attention selecting its blocks per head (the
// selection on the device, its block means all-gathered stream-ordered under cp, its totals read
// with the metrics). Only in myriad_emulated_mpi_tests.
#include <gtest/gtest.h>

#include <algorithm>
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
  int ep = 0;  // > 0: an MoE model (4 experts, top 2) with this expert-parallel degree
  bool dropless = false;
  int pp = 1;
  GradientCompression compression = GradientCompression::none;
  bool onebit_adam = false;  // freeze_step 1: the counted (second) step is compressed
  bool selection = false;    // block-sparse attention selecting per head (blocks of 64, T 256)
  bool local_sgd = false;    // training.sync local, local_steps 1: the counted step has an outer step
};
void PrintTo(const SyncCase& c, std::ostream* out) { *out << c.name; }

class DeviceStepSynchronisations : public ::testing::TestWithParam<SyncCase> {};

TEST_P(DeviceStepSynchronisations, NoWaitInsideForwardAndBackward) {
  World world;
  distributed::Communicator& comm = *world.comm;
  const SyncCase c = GetParam();
  if (comm.size() % (c.tp * c.cp * c.pp) != 0) GTEST_SKIP() << "tp x cp x pp does not divide the world";
  const int dp = comm.size() / (c.tp * c.cp * c.pp);
  const fs::path dir = shared_dir(comm, std::string("device_sync_") + c.name);
  RunConfig config = config_for(comm.rank(), dir, "gpt2", dp, c.zero_stage, 2);
  config.parallel.tp = c.tp;
  config.parallel.sequence_parallel = c.sequence_parallel;
  config.parallel.cp = c.cp;
  config.parallel.pp = c.pp;
  if (c.sequence_parallel) config.training.micro_batch = 3;
  config.model.n_embd = 128;
  config.model.n_head = 2;
  config.model.vocab_size = 330;
  config.training.device = ComputeDevice::cuda;
  if (c.ep > 0) {
    config.model.architecture = Architecture::moe;
    config.model.moe_base = BlockFamily::gpt2;
    config.model.num_experts = 4;
    config.model.top_k = 2;
    config.model.expert_capacity = c.dropless ? 0 : 12;
    config.model.dropless = c.dropless;
    config.model.expert_ffn_hidden = 96;
    config.parallel.ep = c.ep;
  }
  if (c.selection) {  // the selection runs on the device: its layout and totals stay there
    config.model.context_length = 256;
    config.training.seq_len = 256;
    config.apply_override("model.attention.kind=block_sparse");
    config.apply_override("model.attention.block_size=64");
    config.model.sparse_ratio = 0.5;
  }
  config.training.gradient_compression = c.compression;
  if (c.onebit_adam) {
    config.training.optimizer = OptimizerKind::onebit_adam;
    config.training.freeze_step = 1;
  }
  if (c.local_sgd) {
    config.training.sync = SyncMode::local;
    config.training.local_steps = 1;
  }
  prepare_shared_data(comm, config);
  distributed::ProcessGroups groups(
      distributed::GridShape{.tp = c.tp, .cp = c.cp, .ep = std::max(c.ep, 1), .dp = dp, .pp = c.pp},
      world.runtime.world());
  Engine engine(config, make_rank_logger(comm.rank(), "warn"), &groups);
  (void)engine.step();  // buffers, plans and the pinned upload ring settle
  std::uint64_t at_update = 0;
  engine.set_before_update([&at_update] { at_update = emulated::host_synchronizations(); });
  const std::uint64_t start = emulated::host_synchronizations();
  (void)engine.step();
  const std::uint64_t end = emulated::host_synchronizations();
  std::cout << "[ sync ] " << c.name << " rank " << comm.rank() << ": forward+backward " << at_update - start
            << ", update+metrics " << end - at_update << "\n";
  // Dropless: one count read per MoE layer (every layer here) and micro-batch (2 per step).
  const std::uint64_t allowed = c.dropless ? static_cast<std::uint64_t>(config.model.n_layer) * 2 : 0;
  EXPECT_LE(at_update - start, allowed)
      << "host waits inside forward/backward (MYRIAD_EMULATED_SYNC_TRACE=1 shows where)";
  // The update's reads: the gradient norms (one transfer), then the loss (one transfer), and for
  // MoE the routing totals of every layer (one transfer), for the selection its totals (one).
  EXPECT_LE(end - at_update, c.ep > 0 || c.selection ? 3u : 2u) << "host waits in the update and the metrics";
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, DeviceStepSynchronisations,
    ::testing::Values(SyncCase{"dp_zero0"}, SyncCase{"dp_zero1", 1, 1}, SyncCase{"dp_zero2", 1, 2},
                      SyncCase{"dp_zero3", 1, 3}, SyncCase{"tp2", 2}, SyncCase{"tp2_sp", 2, 0, true},
                      SyncCase{"cp2", 1, 0, false, 2}, SyncCase{"moe_dp_capacity", 1, 0, false, 1, 1},
                      SyncCase{"moe_ep2_capacity", 1, 0, false, 1, 2},
                      SyncCase{"moe_ep2_dropless", 1, 0, false, 1, 2, true},
                      SyncCase{"moe_cp2_capacity", 1, 0, false, 2, 1}, SyncCase{"pp2", 1, 0, false, 1, 0, false, 2},
                      SyncCase{.name = "dp_int8", .compression = GradientCompression::int8},
                      SyncCase{.name = "dp_topk", .compression = GradientCompression::topk},
                      SyncCase{.name = "dp_onebit_adam", .onebit_adam = true},
                      SyncCase{.name = "dp_selection", .selection = true},
                      SyncCase{.name = "cp2_selection", .cp = 2, .selection = true},
                      SyncCase{.name = "dp_int8_zero1", .zero_stage = 1, .compression = GradientCompression::int8},
                      SyncCase{.name = "dp_topk_zero3", .zero_stage = 3, .compression = GradientCompression::topk},
                      SyncCase{.name = "moe_ep2_onebit_adam", .ep = 2, .onebit_adam = true},
                      SyncCase{.name = "moe_ep2_local_sgd", .ep = 2, .local_sgd = true}),
    [](const ::testing::TestParamInfo<SyncCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace myriad::train
