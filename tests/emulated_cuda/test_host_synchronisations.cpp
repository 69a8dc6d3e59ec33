// How often a training step on training.device cuda makes the host wait for the GPU, counted by
// the emulated CUDA layer (emulated_streams.h: host_synchronizations). A wait inside forward or
// backward stalls the host's launch queue, so the GPU idles while the host catches up; the step
// may read its results once, after the backward pass (the gradient norm the update needs, the
// loss, the metrics). The counts are per step, after a first step that sets up buffers.
#include <gtest/gtest.h>

#include <cstdint>
#include <iostream>

#include "emulated_streams.h"
#include "engine_fixtures.h"
#include "myriad/train/engine.h"

namespace myriad::train {
namespace {

using namespace fixtures;

struct StepWaits {
  std::uint64_t forward_backward = 0;  // from the step's start to the update (reductions included)
  std::uint64_t update_and_metrics = 0;
};

// The waits of one step of `engine`, split at the update (Engine::set_before_update).
StepWaits count_step(Engine& engine) {
  std::uint64_t at_update = 0;
  engine.set_before_update([&at_update] { at_update = emulated::host_synchronizations(); });
  const std::uint64_t start = emulated::host_synchronizations();
  (void)engine.step();
  const std::uint64_t end = emulated::host_synchronizations();
  engine.set_before_update(nullptr);
  return StepWaits{at_update - start, end - at_update};
}

RunConfig dense_config(const fs::path& dir, const std::string& corpus) {
  RunConfig c = tiny_config(dir, corpus);
  c.model.n_embd = 128;
  c.model.n_head = 2;
  c.training.steps = 8;
  c.training.device = ComputeDevice::cuda;
  return c;
}

TEST(HostSynchronisations, DenseStep) {
  const fs::path dir = fresh_dir("host_sync_dense");
  const std::string corpus = write_corpus(dir);
  Engine engine(dense_config(dir, corpus), quiet_logger());
  (void)engine.step();
  const StepWaits waits = count_step(engine);
  std::cout << "[ sync ] dense step: forward+backward " << waits.forward_backward << ", update+metrics "
            << waits.update_and_metrics << "\n";
  EXPECT_EQ(waits.forward_backward, 0u) << "MYRIAD_EMULATED_SYNC_TRACE=1 shows where the host waits";
  // The update's reads: the gradient norms (one transfer), then the loss (one transfer).
  EXPECT_LE(waits.update_and_metrics, 2u);
}

// Block-sparse attention that selects its blocks per head (model.attention.sparse_ratio > 0): the
// selection runs on the device (ops/block_selection.h), its layout stays there and its stats are
// read once with the metrics, so forward and backward wait for nothing.
TEST(HostSynchronisations, SelectingBlockSparseStep) {
  const fs::path dir = fresh_dir("host_sync_selection");
  const std::string corpus = write_corpus(dir);
  RunConfig c = dense_config(dir, corpus);
  c.model.context_length = 128;
  c.training.seq_len = 128;
  c.training.micro_batch = 2;
  c.apply_override("model.attention.kind=block_sparse");
  c.apply_override("model.attention.block_size=32");
  c.model.sparse_ratio = 0.9;
  Engine engine(c, quiet_logger());
  (void)engine.step();
  const StepWaits waits = count_step(engine);
  std::cout << "[ sync ] selecting block-sparse step: forward+backward " << waits.forward_backward
            << ", update+metrics " << waits.update_and_metrics << "\n";
  EXPECT_EQ(waits.forward_backward, 0u) << "MYRIAD_EMULATED_SYNC_TRACE=1 shows where the host waits";
  // The gradient norms, the loss and the selection's totals (one transfer each).
  EXPECT_LE(waits.update_and_metrics, 3u);
}

}  // namespace
}  // namespace myriad::train
