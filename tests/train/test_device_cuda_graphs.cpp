// training.cuda_graphs (train/micro_batch_graph.h): a run that records each micro-batch's forward
// and backward as a CUDA graph and replays it follows the run without graphs bit for bit — the
// same kernels on the same buffers — through the first (eager) micro-batch, the warm-up in the
// graph's pool, the recording and the replays; with the loss scale and the valid-token count
// changing between steps (staged, not baked in); after the model's buffers were replaced (the
// graph recorded again); and where the layout rules graphs out, the run says why and trains
// without. In myriad_tests it needs a GPU (skips otherwise); myriad_emulated_device_tests runs it
// with the CUDA layer emulated (a recording there holds the launchers' closures and a replay runs
// them; a host wait while recording fails the recording, as on a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <string>

#include "device_fixtures.h"
#include "myriad/core/error.h"
#include "myriad/train/engine.h"
#include "myriad/train/micro_batch_graph.h"
#if MYRIAD_EMULATED_CUDA
#include "emulated_streams.h"
#endif

namespace myriad::train {
namespace {

using namespace fixtures;

RunConfig graph_config(const fs::path& dir, const std::string& corpus, bool graphs) {
  RunConfig c = tiny_device_config(dir, corpus, ComputeDevice::cuda);
  c.training.gradient_accumulation = 3;
  c.training.cuda_graphs = graphs;
  c.checkpoint.dir = (dir / (graphs ? "checkpoints_graphs" : "checkpoints_eager")).string();
  return c;
}

// Equal, or both NaN (an fp16 overflow's gradient norm).
bool same_value(double a, double b) { return a == b || (std::isnan(a) && std::isnan(b)); }

// Steps of both engines; returns how many the graphs engine skipped.
int expect_same_steps(Engine& eager, Engine& graphs, int steps, const std::string& what) {
  int skipped = 0;
  for (int step = 0; step < steps; ++step) {
    const StepMetrics want = eager.step(), got = graphs.step();
    skipped += got.skipped ? 1 : 0;
    EXPECT_PRED2(same_value, got.loss, want.loss) << what << " step " << step;
    EXPECT_PRED2(same_value, got.grad_norm, want.grad_norm) << what << " step " << step;
    EXPECT_EQ(got.skipped, want.skipped) << what << " step " << step;
    EXPECT_EQ(got.loss_scale, want.loss_scale) << what << " step " << step;
  }
  return skipped;
}

TEST(DeviceCudaGraphs, ReplayedMicroBatchesEqualTheEagerRunBitForBit) {
  if (!gpu_visible()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fresh_dir("device_cuda_graphs");
  const std::string corpus = write_corpus(dir);
  Engine eager(graph_config(dir, corpus, false), quiet_logger());
  Engine graphs(graph_config(dir, corpus, true), quiet_logger());
  ASSERT_EQ(eager.micro_batch_graph(), nullptr);
  const MicroBatchGraph* graph = graphs.micro_batch_graph();
  ASSERT_NE(graph, nullptr);
#if MYRIAD_EMULATED_CUDA
  const std::uint64_t launched_before = emulated::cuda_graphs_launched();
  const std::uint64_t refused_before = emulated::calls_refused_while_capturing();
#endif
  // Step 1: micro-batch 0 eager, 1 the warm-up in the pool, 2 recorded and launched; then 3 a step.
  expect_same_steps(eager, graphs, 3, "graphs");
  EXPECT_EQ(graph->replays(), 1 + 3 + 3);
  EXPECT_GT(graph->launches_recorded(), 20u) << "a whole forward and backward is recorded";
#if MYRIAD_EMULATED_CUDA
  EXPECT_EQ(emulated::cuda_graphs_launched() - launched_before, 7u);
  EXPECT_EQ(emulated::calls_refused_while_capturing(), refused_before) << "a host wait while recording";
#endif
  // An evaluation between steps reads the same buffers; the curves stay together.
  EXPECT_EQ(graphs.evaluate(), eager.evaluate());
  expect_same_steps(eager, graphs, 1, "after an evaluation");
  // Buffers for another batch shape replace the recorded ones: the graph is recorded again.
  const std::int64_t T = graphs.model().buffers_T();
  graphs.model().prepare(1, T, Recompute::none, 1);
  eager.model().prepare(1, T, Recompute::none, 1);
  const std::int64_t replays = graph->replays();
  expect_same_steps(eager, graphs, 2, "after the buffers changed");
  EXPECT_EQ(graph->replays() - replays, 1 + 3);  // eager, warm-up, record + launch; then a step of replays
  EXPECT_FALSE(graph->off());
}

// The other dense paths a micro-batch can take — LLaMA blocks (RoPE, SwiGLU, grouped-query heads)
// in bf16 (16-bit GEMM operands and attention through cuDNN's fused attention where the build has
// it), full and selective recompute, ZeRO 1 over a data-parallel group of one, fp8 with its delayed
// scales — replay equal to the run without graphs; and a checkpoint saved and loaded in the middle leaves the recorded
// graph valid (the state is loaded into the buffers it baked in).
TEST(DeviceCudaGraphs, EveryDensePathReplaysEqualToTheEagerRun) {
  if (!gpu_visible()) GTEST_SKIP() << "no CUDA device";
  struct Variant {
    const char* name;
    void (*apply)(RunConfig&);
  };
  const Variant variants[] = {
      {"llama bf16",
       [](RunConfig& c) {
         c.model.architecture = Architecture::llama;
         c.model.n_kv_head = 1;
         c.training.precision = Precision::bf16;
       }},
      {"full recompute", [](RunConfig& c) { c.training.recompute = Recompute::full; }},
      {"selective recompute", [](RunConfig& c) { c.training.recompute = Recompute::selective; }},
      {"zero 1", [](RunConfig& c) { c.parallel.zero_stage = 1; }},
      // The delayed scales change at every step's end (the first step's are measured just in time):
      // the quantisation and the FP8 GEMMs read them from the device when the replay runs.
      {"fp8", [](RunConfig& c) { c.training.precision = Precision::fp8; }},
  };
  for (const Variant& v : variants) {
    const fs::path dir = fresh_dir(std::string("device_cuda_graphs_") + (v.name[0] == 'l' ? "llama" : "variant") +
                                   std::to_string(&v - variants));
    const std::string corpus = write_corpus(dir);
    RunConfig eager_config = graph_config(dir, corpus, false), graphs_config = graph_config(dir, corpus, true);
    v.apply(eager_config);
    v.apply(graphs_config);
    Engine eager(eager_config, quiet_logger());
    Engine graphs(graphs_config, quiet_logger());
    ASSERT_NE(graphs.micro_batch_graph(), nullptr) << v.name;
    expect_same_steps(eager, graphs, 2, v.name);
    const std::int64_t replays = graphs.micro_batch_graph()->replays();
    EXPECT_EQ(replays, 4) << v.name;  // step 1: the third micro-batch; step 2: all three
    eager.load(eager.save());
    graphs.load(graphs.save());
    expect_same_steps(eager, graphs, 2, std::string(v.name) + " after a save and load");
    EXPECT_EQ(graphs.micro_batch_graph()->replays() - replays, 6) << v.name << ": the graph was not replayed";
  }
}

// Block-sparse attention: the per-head selection runs on the device (its layout and its statistics
// stay there), so a replay selects again from the replayed q and k and adds to the step's totals; a
// fixed block layout (sparse_ratio 0) is the same every micro-batch of the shape: its device arrays
// are uploaded once (CudaBackend::device_block_layout) and each replay adds the counts its recorded
// forward made on the host. Either way the curve and the attention metrics are the eager run's.
TEST(DeviceCudaGraphs, BlockSparseLayoutsReplayEqualToTheEagerRun) {
  if (!gpu_visible()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fresh_dir("device_cuda_graphs_block_sparse");
  const std::string corpus = write_corpus(dir);
  auto sparse = [&](bool graphs, double ratio) {
    RunConfig c = graph_config(dir, corpus, graphs);
    c.model.attention_kind = AttentionLayout::block_sparse;
    c.model.context_length = 128;  // four blocks of 32 (the CUDA kernels' query tile)
    c.training.seq_len = 128;
    c.model.attention_block_size = 32;
    c.model.sparse_ratio = ratio;
    if (ratio > 0) c.model.max_blocks = 2;  // the selection's (refused for the fixed pattern alone)
    return c;
  };
  for (const double ratio : {0.5, 0.0}) {
    const std::string name = ratio > 0 ? "selected blocks" : "fixed layout";
    EXPECT_EQ(MicroBatchGraph::unavailable_reason(sparse(true, ratio)), "") << name;
    Engine eager(sparse(false, ratio), quiet_logger());
    Engine graphs(sparse(true, ratio), quiet_logger());
    ASSERT_NE(graphs.micro_batch_graph(), nullptr) << name;
    for (int step = 0; step < 3; ++step) {
      const StepMetrics want = eager.step(), got = graphs.step();
      EXPECT_EQ(got.loss, want.loss) << name << ", step " << step;
      EXPECT_EQ(got.grad_norm, want.grad_norm) << name << ", step " << step;
      EXPECT_EQ(got.attention.selects, ratio > 0) << name;
      EXPECT_GT(got.attention.density, 0.0) << name;
      EXPECT_LT(got.attention.density, 1.0) << name;
      EXPECT_EQ(got.attention.density, want.attention.density) << name << ", step " << step;
      EXPECT_EQ(got.attention.kept_blocks_per_query_block, want.attention.kept_blocks_per_query_block) << name;
      EXPECT_EQ(got.attention.estimated_mass, want.attention.estimated_mass) << name << ", step " << step;
    }
    EXPECT_EQ(graphs.micro_batch_graph()->replays(), 1 + 3 + 3) << name;
    EXPECT_FALSE(graphs.micro_batch_graph()->off()) << name;
  }
}

// fp16: the dynamic loss scale halves on overflow and so changes between steps; the graph reads it
// from the staged loss gradient, so the skipped steps and the curve are the eager run's.
TEST(DeviceCudaGraphs, TheChangingLossScaleIsStagedNotRecorded) {
  if (!gpu_visible()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fresh_dir("device_cuda_graphs_fp16");
  const std::string corpus = write_corpus(dir);
  auto fp16 = [&](bool graphs) {
    RunConfig c = graph_config(dir, corpus, graphs);
    c.training.precision = Precision::fp16;
    c.training.initial_loss_scale = std::ldexp(1.0, 24);  // overflows first, then settles
    c.training.loss_scale_window = 1000;
    return c;
  };
  Engine eager(fp16(false), quiet_logger());
  Engine graphs(fp16(true), quiet_logger());
  ASSERT_NE(graphs.micro_batch_graph(), nullptr);
  const int skipped = expect_same_steps(eager, graphs, 8, "fp16");
  EXPECT_GT(skipped, 0) << "no overflow: the scale never changed";
  EXPECT_LT(skipped, 8) << "the scale never settled";
  EXPECT_GT(graphs.micro_batch_graph()->replays(), 15);
}

// Data parallelism over one rank (a loopback group) with recompute: still recorded. The reasons
// graphs are ruled out name the setting.
TEST(DeviceCudaGraphs, LayoutsThatRuleGraphsOutAreNamed) {
  RunConfig c;
  c.training.device = ComputeDevice::cuda;
  EXPECT_EQ(MicroBatchGraph::unavailable_reason(c), "");
  auto reason = [&](auto change) {
    RunConfig changed = c;
    change(changed);
    return MicroBatchGraph::unavailable_reason(changed);
  };
  EXPECT_EQ(reason([](RunConfig& r) { r.parallel.tp = 2; }), "");  // its NCCL calls are recorded with the pass
  EXPECT_NE(reason([](RunConfig& r) { r.parallel.pp = 2; }).find("parallel.pp 2"), std::string::npos);
  EXPECT_EQ(reason([](RunConfig& r) { r.parallel.cp = 2; }), "");          // the ring's send / recv recorded
  EXPECT_EQ(reason([](RunConfig& r) { r.parallel.zero_stage = 3; }), "");  // gathers and reductions recorded
  EXPECT_EQ(reason([](RunConfig& r) { r.training.precision = Precision::fp8; }), "");  // scales read on the device
  EXPECT_EQ(reason([](RunConfig& r) {  // its reductions are recorded with the pass
              r.parallel.dp = 2;
              r.training.gradient_accumulation = 1;
            }),
            "");
  EXPECT_EQ(reason([](RunConfig& r) {
              r.parallel.dp = 2;
              r.training.gradient_accumulation = 4;
            }),
            "");
  EXPECT_EQ(reason([](RunConfig& r) {  // over one rank ZeRO 1's reduce-scatter is a copy: recorded
              r.parallel.zero_stage = 1;
              r.training.gradient_accumulation = 1;
            }),
            "");
  const auto moe = [](RunConfig& r) {
    r.model.architecture = Architecture::moe;
    r.model.num_experts = 4;
  };
  EXPECT_EQ(reason(moe), "");  // capacity routing: every size from the shapes
  EXPECT_NE(reason([&](RunConfig& r) {
              moe(r);
              r.model.dropless = true;
            }).find("model.dropless"),
            std::string::npos);
  EXPECT_EQ(reason([&](RunConfig& r) {  // capacity routing's all-to-alls: fixed sizes, recorded
              moe(r);
              r.parallel.dp = 2;
              r.parallel.ep = 2;
            }),
            "");
  EXPECT_EQ(reason([&](RunConfig& r) {  // the routers read the staged loss scale
              moe(r);
              r.training.precision = Precision::fp16;
            }),
            "");
}

// A mixture of experts with capacity routing: every expert's rows and pointers follow from the
// shapes (one GEMM per expert, nothing uploaded or read back inside the pass), so the micro-batch is
// recorded; each replay adds the routed tokens its recorded forward counted on the host, and the
// router's loss gradients read the step's loss scale where the LM loss's seed is staged. Loss,
// gradient norm and the routing metrics are the eager run's, under f32, bf16 and fp16 (whose scale
// overflows from 2^24 and comes down while the graph replays: a recorded constant would differ).
TEST(DeviceCudaGraphs, CapacityRoutedMoeReplaysEqualToTheEagerRun) {
  if (!gpu_visible()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fresh_dir("device_cuda_graphs_moe_capacity");
  const std::string corpus = write_corpus(dir);
  for (const Precision precision : {Precision::fp32, Precision::bf16, Precision::fp16}) {
    auto moe = [&](bool graphs) {
      RunConfig c = graph_config(dir, corpus, graphs);
      c.model.architecture = Architecture::moe;
      c.model.num_experts = 4;
      c.model.top_k = 2;
      c.training.precision = precision;
      if (precision == Precision::fp16) {
        c.training.initial_loss_scale = std::ldexp(1.0, 24);  // overflows first, then settles
        c.training.loss_scale_window = 1000;
      }
      return c;
    };
    const std::string name(choice_name(precision));
    Engine eager(moe(false), quiet_logger());
    Engine graphs(moe(true), quiet_logger());
    ASSERT_NE(graphs.micro_batch_graph(), nullptr) << name;
    const int steps = precision == Precision::fp16 ? 6 : 3;
    int skipped = 0;
    for (int step = 0; step < steps; ++step) {
      const StepMetrics want = eager.step(), got = graphs.step();
      skipped += got.skipped ? 1 : 0;
      EXPECT_PRED2(same_value, got.loss, want.loss) << name << ", step " << step;
      EXPECT_PRED2(same_value, got.grad_norm, want.grad_norm) << name << ", step " << step;
      EXPECT_EQ(got.loss_scale, want.loss_scale) << name << ", step " << step;
      ASSERT_EQ(got.moe.size(), want.moe.size()) << name;
      ASSERT_FALSE(got.moe.empty()) << name;
      for (std::size_t i = 0; i < got.moe.size(); ++i) {
        EXPECT_GT(got.moe[i].tokens_per_expert_mean, 0.0) << name << ", step " << step;
        EXPECT_EQ(got.moe[i].tokens_per_expert_mean, want.moe[i].tokens_per_expert_mean) << name << ", step " << step;
        EXPECT_EQ(got.moe[i].tokens_per_expert_max, want.moe[i].tokens_per_expert_max) << name << ", step " << step;
        EXPECT_EQ(got.moe[i].dropped_share, want.moe[i].dropped_share) << name << ", step " << step;
        EXPECT_EQ(got.moe[i].aux_loss, want.moe[i].aux_loss) << name << ", step " << step;
        EXPECT_EQ(got.moe[i].z_loss, want.moe[i].z_loss) << name << ", step " << step;
      }
    }
    EXPECT_EQ(graphs.micro_batch_graph()->replays(), 1 + 3 * (steps - 1)) << name;
    EXPECT_FALSE(graphs.micro_batch_graph()->off()) << name;
    if (precision == Precision::fp16) {
      EXPECT_GT(skipped, 0) << "no overflow: the scale never changed";
      EXPECT_LT(skipped, steps) << "the scale never settled";
    }
  }
}

TEST(DeviceCudaGraphs, RuledOutLayoutsTrainWithoutGraphs) {
  if (!gpu_visible()) GTEST_SKIP() << "no CUDA device";
  const fs::path dir = fresh_dir("device_cuda_graphs_moe");
  RunConfig c = graph_config(dir, write_corpus(dir), true);
  c.model.architecture = Architecture::moe;
  c.model.num_experts = 2;
  c.model.dropless = true;  // rows sized from counts read back per micro-batch
  Engine engine(c, quiet_logger());
  EXPECT_EQ(engine.micro_batch_graph(), nullptr);
  EXPECT_TRUE(std::isfinite(engine.step().loss));
}

TEST(DeviceCudaGraphs, OnTheCpuTheKeyIsRefused) {
  RunConfig c;
  c.training.cuda_graphs = true;
  try {
    c.training.validate();
    ADD_FAILURE() << "training.cuda_graphs accepted with training.device cpu";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("training.cuda_graphs"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace myriad::train
