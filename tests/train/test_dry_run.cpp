// The dry run: the meta device counts allocations without memory and refuses to compute, dry-run
// groups carry each rank's grid coordinates and refuse to communicate, the pipeline's slot count
// matches the schedules' closed forms, and Engine::dry_run's breakdown adds up to what the meta
// device counted, shards add up over dp, and equals a real engine's accounting at world 1.
#include <gtest/gtest.h>

#include <filesystem>

#include "engine_fixtures.h"
#include "myriad/distributed/dry_run_communicator.h"
#include "myriad/distributed/process_groups.h"
#include "myriad/ops/matmul.h"
#include "myriad/ops/meta_backend.h"
#include "myriad/train/engine.h"
#include "myriad/parallel/pipeline_executor.h"

namespace myriad::train {
namespace {

using namespace fixtures;

TEST(MetaBackend, CountsLiveAndPeakBytesByLabelWithoutMemory) {
  ops::MetaBackend meta;
  meta.set_label("a");
  Tensor x = meta.empty({1000, 1000});  // 4 MB that nobody allocates
  {
    Tensor y = meta.empty({10}, DType::bf16);
    EXPECT_EQ(meta.usage().live_bytes, 4'000'000 + 20);
    EXPECT_TRUE(y.device().is_meta());
  }
  meta.set_label("b");
  Tensor z = meta.empty({1 << 20, 1 << 20});  // 4 TiB
  EXPECT_EQ(meta.usage().live_bytes, 4'000'000 + (std::int64_t{4} << 40));
  EXPECT_EQ(meta.usage().peak_bytes, meta.usage().live_bytes);
  z = Tensor();
  EXPECT_EQ(meta.usage().live_bytes, 4'000'000);
  EXPECT_EQ(meta.usage_by_label().at("a").live_bytes, 4'000'000);
  EXPECT_EQ(meta.usage_by_label().at("a").peak_bytes, 4'000'020);
  EXPECT_EQ(meta.usage_by_label().at("b").live_bytes, 0);
  EXPECT_EQ(meta.usage().tensors, 1);
  Tensor view = x.slice(0, 10, 20);  // views share the storage: nothing new counted
  EXPECT_EQ(meta.usage().live_bytes, 4'000'000);
  EXPECT_EQ(Device::parse("meta"), Device::meta());
  EXPECT_EQ(x.device().str(), "meta");
}

TEST(MetaBackend, RefusesToReadOrComputeValues) {
  ops::MetaBackend meta;
  Tensor a = meta.empty({4, 4}), b = meta.empty({4, 4}), out = meta.empty({4, 4});
  try {
    matmul_forward({}, a, b, out);
    FAIL() << "a matmul on meta tensors must throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("meta tensors have a shape but no values"), std::string::npos) << e.what();
  }
  EXPECT_THROW(meta.copy_to_host(a), Error);
  Tensor host = Tensor::zeros({3, 5});
  Tensor placed = meta.copy_from_host(host);
  EXPECT_EQ(placed.shape(), host.shape());
  EXPECT_TRUE(placed.device().is_meta());
}

TEST(DryRunGroups, EveryRankHoldsItsGridCoordinatesAndNothingCommunicates) {
  const distributed::GridShape shape{.tp = 2, .cp = 2, .ep = 2, .dp = 4, .pp = 2};
  const distributed::RankGrid grid(shape, shape.product());
  for (int rank = 0; rank < shape.product(); ++rank) {
    distributed::ProcessGroups groups = distributed::ProcessGroups::for_dry_run(shape, rank);
    const distributed::GridCoord coord = grid.coords(rank);
    EXPECT_EQ(groups.world().rank(), rank);
    EXPECT_EQ(groups.world().size(), 32);
    for (distributed::Axis axis : distributed::kAxes) {
      EXPECT_EQ(groups.group(axis).rank(), coord[axis]) << grid.describe(rank) << " " << distributed::axis_name(axis);
      EXPECT_EQ(groups.group(axis).size(), grid.size(axis));
    }
    // dp / ep replicas x cp ranks hold the same experts, in RankGrid::expert_data_group's order.
    EXPECT_EQ(groups.expert_data().size(), 4);
    const std::vector<int> experts = grid.expert_data_group(rank);
    EXPECT_EQ(experts.at(static_cast<std::size_t>(groups.expert_data().rank())), rank);
    EXPECT_EQ(groups.data_context().size(), 8);
    const std::vector<int> members = grid.data_context_group(rank);
    EXPECT_EQ(members.at(static_cast<std::size_t>(groups.data_context().rank())), rank);
  }
  distributed::ProcessGroups groups = distributed::ProcessGroups::for_dry_run(shape, 3);
  try {
    groups.group(distributed::Axis::dp).all_reduce(Tensor::zeros({2}));
    FAIL() << "a dry-run group must not communicate";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce on group dp"), std::string::npos) << e.what();
  }
  EXPECT_THROW(distributed::ProcessGroups::for_dry_run(shape, 32), Error);
}

// A stage with `chunks` empty chunks: the executor needs only their count.
class ChunkCount final : public nn::PipelineStage {
 public:
  explicit ChunkCount(int chunks) : chunks_(chunks) {}
  int num_chunks() const override { return chunks_; }
  void prepare(std::int64_t, std::int64_t, Recompute, int) override {}
  Recompute buffer_mode() const override { return Recompute::none; }
  Tensor chunk_input(int, int) override { return {}; }
  Tensor chunk_output(int, int) override { return {}; }
  Tensor chunk_grad(int, int) override { return {}; }
  std::int64_t forward_chunk(int, int, const Tensor&, const Tensor&) override { return 0; }
  double take_loss_sum() override { return 0.0; }
  void clear_losses() override {}
  void backward_chunk(int, int, const Tensor&, const Tensor&, float) override {}

 private:
  int chunks_;
};

TEST(PipelineSlots, InFlightMicroBatchesMatchTheSchedulesClosedForms) {
  for (int p : {1, 2, 4, 8}) {
    for (int m : {1, 3, 8, 16}) {
      for (int s = 0; s < p; ++s) {
        ChunkCount stage(1);
        distributed::DryRunCommunicator pp("pp", s, p);
        parallel::PipelineExecutor one_f_one_b(stage, pp, PipelineSchedule::one_f_one_b, m, 1);
        EXPECT_EQ(one_f_one_b.slots_in_flight(), std::min(p - s, m)) << "1f1b p " << p << " m " << m << " s " << s;
        parallel::PipelineExecutor gpipe(stage, pp, PipelineSchedule::gpipe, m, 1);
        EXPECT_EQ(gpipe.slots_in_flight(), m) << "gpipe p " << p << " m " << m;
        if (p > 1 && m % p == 0) {
          ChunkCount two(2);
          parallel::PipelineExecutor interleaved(two, pp, PipelineSchedule::interleaved, m, 2);
          EXPECT_GE(interleaved.slots_in_flight(), std::min(p - s, m));
          EXPECT_LE(interleaved.slots_in_flight(), m);
        }
      }
    }
  }
}

RunConfig layout_config(const std::string& parallel, const std::string& training_extra = "") {
  return RunConfig::from_yaml_string(R"(
model: {architecture: gpt2, vocab_size: 320, n_layer: 4, n_head: 4, n_embd: 64, context_length: 32}
parallel: )" + parallel + R"(
training: {micro_batch: 2, gradient_accumulation: 4, seq_len: 32)" +
                                         training_extra + "}\n",
                                     "dry_run_test");
}

std::int64_t parts(const DryRunReport& r) {
  return r.master_weight_bytes + r.compute_weight_bytes + r.gradient_bytes + r.optimizer_bytes + r.activation_bytes;
}

TEST(EngineDryRun, PartsAddUpToWhatTheMetaDeviceCountedForEveryRank) {
  struct Case {
    std::string parallel, training;
    int world;
  };
  const std::vector<Case> cases = {
      {"{tp: 2, pp: 2, zero_stage: 1}", "", 8},
      {"{tp: 2, sequence_parallel: true, zero_stage: 0}", ", precision: bf16", 4},
      {"{zero_stage: 2}", ", precision: bf16, recompute: selective", 4},
      {"{zero_stage: 3}", ", precision: bf16, recompute: full", 4},
      {"{pp: 2, virtual_stages: 2, pp_schedule: interleaved}", "", 2},
      {"{cp: 2, zero_stage: 1}", "", 4},
  };
  for (const Case& c : cases) {
    const RunConfig config = layout_config(c.parallel, c.training);
    for (int rank = 0; rank < c.world; ++rank) {
      const DryRunReport r = Engine::dry_run(config, c.world, rank);
      EXPECT_EQ(r.total_bytes, parts(r)) << c.parallel << " " << r.role;
      EXPECT_GT(r.activation_bytes, 0);
      EXPECT_GE(r.peak_bytes, r.total_bytes);
    }
  }
}

TEST(EngineDryRun, ZeroShardsPartitionTheMomentsOverDataParallelRanks) {
  const RunConfig zero0 = layout_config("{tp: 2, zero_stage: 0}");
  const RunConfig zero1 = layout_config("{tp: 2, zero_stage: 1}");
  // World 8 = tp 2 x dp 4: ranks 0, 2, 4, 6 are tp rank 0 of the four replicas.
  const DryRunReport whole = Engine::dry_run(zero0, 8, 0);
  std::int64_t sum = 0;
  for (int rank : {0, 2, 4, 6}) {
    const DryRunReport r = Engine::dry_run(zero1, 8, rank);
    EXPECT_EQ(r.parameter_elements, whole.parameter_elements);
    EXPECT_EQ(r.optimizer_bytes, 8 * r.optimizer_elements);
    sum += r.optimizer_elements;
  }
  EXPECT_EQ(sum, whole.optimizer_elements);
}

TEST(EngineDryRun, EqualsARealEnginesAccountingAtWorldOne) {
  const fs::path dir = fresh_dir("dry_run_real");
  const RunConfig config = tiny_config(dir, write_corpus(dir));
  Engine real(config, quiet_logger());
  const MemoryReport held = real.memory_report();
  const DryRunReport dry = Engine::dry_run(config, 1, 0);
  EXPECT_EQ(dry.master_weight_bytes, held.parameter_bytes);
  EXPECT_EQ(dry.gradient_bytes, held.gradient_bytes);
  EXPECT_EQ(dry.optimizer_bytes, held.optimizer_bytes);
  EXPECT_EQ(dry.compute_weight_bytes, 0);
  EXPECT_EQ(dry.activation_slots, 1);
  fs::remove_all(dir);
}

TEST(EngineDryRun, BuildsTheSeedsTrillionParameterMixtureOfExpertsWithoutMemory) {
  const RunConfig config =
      RunConfig::from_yaml_file((fs::path(MYRIAD_SOURCE_DIR) / "configs" / "moe_1t.yaml").string());
  const DryRunReport first = Engine::dry_run(config, 2048, 0);
  const DryRunReport last = Engine::dry_run(config, 2048, 2047);
  EXPECT_EQ(first.pp_stage, 0);
  EXPECT_EQ(last.pp_stage, 15);
  EXPECT_GT(first.parameter_elements, 2'000'000'000);  // ~2.6 B per rank: 4 layers of 2 of 128 experts + attention
  EXPECT_EQ(first.total_bytes, parts(first));
  EXPECT_EQ(last.total_bytes, parts(last));
  EXPECT_EQ(first.activation_slots, 16);  // 1F1B's first stage keeps pp micro-batches in flight
  EXPECT_EQ(last.activation_slots, 1);
  EXPECT_THROW(Engine::dry_run(config, 2048, 2048), Error);
  EXPECT_THROW(Engine::dry_run(config, 1000, 0), Error);  // 16 x 128 != 1000
}

}  // namespace
}  // namespace myriad::train
