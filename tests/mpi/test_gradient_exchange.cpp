// Compressed gradient exchange under mpiexec: CompressedSum gives every rank the same bits, loses
// nothing (the sum of outputs over calls equals the sum of inputs minus the errors still held),
// and sends exactly its closed-form bytes (sign: <= 1/16 of a ring all-reduce); 1-bit Adam
// trains exactly like AdamW through freeze_step, then within 2 % of its loss with <= 1/16 of the
// bytes; int8 and top-k gradient compression with error feedback stay within a stated band of
// the exact run over 300 steps; at ZeRO 1-3 (compressed reduce-scatters, CompressedReduceScatter
// losing nothing either) the same band around the exact run of the stage.
#include <gtest/gtest.h>

#include <cmath>

#include "engine_test_support.h"
#include "mpi_test_support.h"
#include "myriad/distributed/compressed_reduce_scatter.h"
#include "myriad/distributed/compressed_sum.h"
#include "myriad/distributed/process_groups.h"
#include "myriad/train/engine.h"
#include "myriad/parallel/local_sgd.h"

namespace myriad::train {
namespace {

using namespace testing;

TEST(GradientExchange, CompressedSumIsIdenticalOnEveryRankAndLosesNothing) {
  auto comm = myriad::testing::make_world("dp");
  const int ranks = comm->size(), r = comm->rank();
  for (distributed::CompressionSpec spec : {distributed::CompressionSpec{distributed::Compression::sign},
                                            distributed::CompressionSpec{distributed::Compression::int8},
                                            distributed::CompressionSpec{distributed::Compression::topk, 0.02}}) {
    SCOPED_TRACE(distributed::compression_name(spec.kind));
    const std::int64_t n = 10007;
    distributed::CompressedSum sum(*comm, n, spec);
    std::vector<double> inputs(n, 0.0), outputs(n, 0.0);
    const int calls = 20;
    comm->reset_stats();
    for (int t = 0; t < calls; ++t) {
      Tensor x = Tensor::empty({n});
      myriad::testing::fill_input(x, 40 + t, r);
      for (std::int64_t i = 0; i < n; ++i) {
        for (int p = 0; p < ranks; ++p) inputs[i] += myriad::testing::input_value(DType::f32, 40 + t, p, i);
      }
      sum.sum(x);
      for (std::int64_t i = 0; i < n; ++i) outputs[i] += x.data<float>()[i];
      const std::vector<std::uint64_t> hashes = myriad::testing::hashes_on_all_ranks(x);
      for (int p = 1; p < ranks; ++p) ASSERT_EQ(hashes[p], hashes[0]) << "rank " << p << " differs, call " << t;
    }
    // Held errors: every rank's worker error, and each server's error of its chunk.
    Tensor held = sum.worker_error().contiguous();
    Tensor all = Tensor::zeros({n});
    comm->all_reduce(held);
    const distributed::ChunkRange own = distributed::chunk_range(n, ranks, r);
    std::copy(sum.server_error().data<float>(), sum.server_error().data<float>() + own.size(),
              all.data<float>() + own.begin);
    comm->all_reduce(all);
    double worst = 0.0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double still_held = held.data<float>()[i] + all.data<float>()[i];
      worst = std::max(worst, std::fabs(outputs[i] - (inputs[i] - still_held)));
    }
    EXPECT_LT(worst, 2e-3);
    const distributed::CommOpStats bytes = comm->stats()[distributed::CommOp::all_to_all];
    EXPECT_EQ(bytes.bytes_sent, calls * sum.bytes_sent_per_call());
    if (spec.kind == distributed::Compression::sign && ranks > 1) {
      const double ring = 2.0 * 4.0 * n * (ranks - 1) / ranks;
      EXPECT_LE(static_cast<double>(sum.bytes_sent_per_call()), ring / 16.0);
    }
  }
}

// The sharded form: each owner ends with the sum of the decoded chunks of its shard; over calls,
// the owners' outputs equal the sum of the inputs minus the errors the senders still hold.
TEST(GradientExchange, CompressedReduceScatterLosesNothing) {
  auto comm = myriad::testing::make_world("dp");
  const int ranks = comm->size(), r = comm->rank();
  for (distributed::CompressionSpec spec : {distributed::CompressionSpec{distributed::Compression::int8},
                                            distributed::CompressionSpec{distributed::Compression::topk, 0.02}}) {
    SCOPED_TRACE(distributed::compression_name(spec.kind));
    const std::int64_t n = 10007;
    const distributed::ChunkRange own = distributed::chunk_range(n, ranks, r);
    distributed::CompressedReduceScatter rs(*comm, n, spec);
    std::vector<double> inputs(n, 0.0), outputs(own.size(), 0.0);
    comm->reset_stats();
    const int calls = 20;
    for (int t = 0; t < calls; ++t) {
      Tensor x = Tensor::empty({n}), out = Tensor::empty({own.size()});
      myriad::testing::fill_input(x, 40 + t, r);
      for (std::int64_t i = 0; i < n; ++i) {
        for (int p = 0; p < ranks; ++p) inputs[i] += myriad::testing::input_value(DType::f32, 40 + t, p, i);
      }
      rs.reduce_scatter(x, out);
      for (std::int64_t i = 0; i < own.size(); ++i) outputs[i] += out.data<float>()[i];
    }
    Tensor held = rs.error().contiguous();
    comm->all_reduce(held);  // every sender's error, summed
    double worst = 0.0, scale = 0.0;
    for (std::int64_t i = 0; i < own.size(); ++i) {
      const std::int64_t g = own.begin + i;
      worst = std::max(worst, std::fabs(outputs[i] - (inputs[g] - held.data<float>()[g])));
      scale = std::max(scale, std::fabs(inputs[g]));
    }
    EXPECT_LT(worst, 1e-4 * std::max(1.0, scale));
    EXPECT_EQ(comm->stats()[distributed::CommOp::all_to_all].bytes_sent, calls * rs.bytes_sent_per_call());
  }
}

struct TrainedRun {
  std::vector<double> loss;
  std::vector<std::int64_t> bytes;
};

TrainedRun train(World& world, const fs::path& dir, const std::vector<std::string>& overrides, int steps, int ep = 1) {
  distributed::Communicator& comm = *world.comm;
  RunConfig config = config_for(comm.rank(), dir, "gpt2", comm.size(), 0, 1);
  config.training.steps = steps;
  config.training.warmup_steps = 5;
  config.parallel.bucket_mb = 0;
  for (const std::string& o : overrides) config.apply_override(o);
  prepare_shared_data(comm, config);
  distributed::ProcessGroups groups(distributed::GridShape{.ep = ep, .dp = comm.size()}, world.runtime.world());
  Engine engine(config, make_rank_logger(comm.rank(), "warn"), &groups);
  TrainedRun run;
  for (int s = 0; s < steps; ++s) {
    const StepMetrics m = engine.step();
    run.loss.push_back(m.loss);
    run.bytes.push_back(m.comm_bytes);
  }
  return run;
}

double mean_of_last(const std::vector<double>& v, std::size_t k) {
  double sum = 0.0;
  for (std::size_t i = v.size() - k; i < v.size(); ++i) sum += v[i];
  return sum / static_cast<double>(k);
}

TEST(GradientExchange, OneBitAdamIsAdamThroughFreezeStepThenTracksItWithASixteenthOfTheBytes) {
  World world;
  const fs::path dir = shared_dir(*world.comm, "onebit");
  const int steps = 120, freeze = 30;
  const TrainedRun exact = train(world, dir, {"training.lr=1e-3"}, steps);
  const TrainedRun onebit = train(
      world, dir,
      {"training.lr=1e-3", "training.optimizer=onebit_adam", "training.freeze_step=" + std::to_string(freeze)}, steps);
  // Step s's loss is computed before update s: identical bits through step freeze + 1.
  for (int s = 0; s <= freeze; ++s) EXPECT_EQ(onebit.loss[s], exact.loss[s]) << "step " << s + 1;
  const double exact_final = mean_of_last(exact.loss, 10), onebit_final = mean_of_last(onebit.loss, 10);
  if (world.comm->rank() == 0) {
    std::cout << "1-bit Adam: loss " << exact.loss.front() << " -> exact " << exact_final << ", 1-bit " << onebit_final
              << " (mean of the last 10 steps); bytes/step exact " << exact.bytes.back() << ", 1-bit "
              << onebit.bytes.back() << std::endl;
  }
  // Band: 10 %. Measured here (dp 2, lr 1e-3, 120 steps, loss 5.8 -> 3.13): +0.8 % at freeze 30,
  // from -6.5 % (freeze 20) to +3.5 % (freeze 40) around it — on a model this small, where the
  // variance frozen is freezes matters. The 2 % bar is measured on the main job's model
  // at dp 4 over 600 steps (docs/performance.md: +0.5 %).
  EXPECT_LT(std::fabs(onebit_final - exact_final), 0.10 * exact_final);
  EXPECT_LT(exact_final, exact.loss.front() - 2.0) << "the runs must learn for the comparison to mean something";
  if (world.comm->size() > 1) {
    for (int s = freeze + 1; s < steps; ++s) {
      EXPECT_LE(onebit.bytes[s] * 16, exact.bytes[s]) << "step " << s + 1;
    }
  }
}

TEST(GradientExchange, ErrorFeedbackCompressionStaysWithinTheBandOfTheExactRun) {
  World world;
  const fs::path dir = shared_dir(*world.comm, "compress");
  const int steps = 300;
  const TrainedRun exact = train(world, dir, {}, steps);
  const double exact_final = mean_of_last(exact.loss, 20);
  for (const std::string& code : {std::string("int8"), std::string("topk")}) {
    std::vector<std::string> overrides = {"training.gradient_compression=" + code};
    if (code == "topk") overrides.push_back("training.topk_ratio=0.1");
    const TrainedRun compressed = train(world, dir, overrides, steps);
    const double final_loss = mean_of_last(compressed.loss, 20);
    if (world.comm->rank() == 0) {
      std::cout << code << ": loss over the last 20 of 300 steps " << final_loss << " vs exact " << exact_final
                << "; bytes/step " << compressed.bytes.back() << " vs " << exact.bytes.back() << std::endl;
    }
    // Bands (measured at dp 2: int8 0.2763 vs 0.2761; top-10 % 0.48 vs 0.27): int8 within 1 % of
    // the exact run; top-k within 0.3 nats — AdamW divides each element by its own history, so
    // rarely sent elements take large steps when they are sent, and top-k lags the exact curve.
    if (code == "int8") EXPECT_LT(std::fabs(final_loss - exact_final), 0.01 * exact_final);
    if (code == "topk") EXPECT_LT(final_loss, exact_final + 0.3);
    if (world.comm->size() > 1) EXPECT_LT(compressed.bytes.back() * 3, exact.bytes.back()) << code;
  }
}

// Local SGD's outer step with one inner step, outer_lr 1 and momentum 0 is parameter averaging:
// the reference is every replica's parameters after one inner step (a run whose outer step
// never comes), gathered with raw MPI and averaged in float64.
// A mixture of experts at ep 2: the dense gradients are compressed over dp and the expert
// buckets summed exactly over the expert-data group; int8 tracks the exact run of the layout.
TEST(GradientExchange, Int8WithExpertParallelismTracksTheExactRun) {
  World world;
  if (world.comm->size() % 2 != 0) GTEST_SKIP() << "ep 2 needs an even world";
  const fs::path dir = shared_dir(*world.comm, "compress_ep");
  const int steps = 40;
  std::vector<std::string> overrides = {"model.architecture=moe", "model.num_experts=4", "model.top_k=2",
                                        "parallel.ep=2"};
  const TrainedRun exact = train(world, dir, overrides, steps, 2);
  overrides.push_back("training.gradient_compression=int8");
  const TrainedRun compressed = train(world, dir, overrides, steps, 2);
  const double exact_final = mean_of_last(exact.loss, 10), final_loss = mean_of_last(compressed.loss, 10);
  if (world.comm->rank() == 0) {
    std::cout << "int8 at ep 2: loss over the last 10 of " << steps << " steps " << final_loss << " vs exact "
              << exact_final << "; bytes/step " << compressed.bytes.back() << " vs " << exact.bytes.back() << std::endl;
  }
  EXPECT_LT(exact_final, exact.loss.front() - 1.0) << "the runs must learn for the comparison to mean something";
  EXPECT_LT(std::fabs(final_loss - exact_final), 0.02 * exact_final);
  EXPECT_NE(final_loss, exact_final) << "the compressed run must differ from the exact one";
  EXPECT_LT(compressed.bytes.back() * 2, exact.bytes.back());
}

// 1-bit Adam at ep 2: exact AdamW through freeze_step, then the dense momenta compressed over dp
// and the expert momenta over the expert-data group (two compressed sums, onebit_adam_exchange.h);
// it tracks the exact run of the layout with a fraction of its bytes (the replicas' identity is
// checked on the device: DeviceGradientCompression.onebit_adam_ep2).
TEST(GradientExchange, OneBitAdamWithExpertParallelismTracksTheExactRun) {
  World world;
  distributed::Communicator& comm = *world.comm;
  if (comm.size() % 2 != 0) GTEST_SKIP() << "ep 2 needs an even world";
  const fs::path dir = shared_dir(comm, "onebit_ep");
  const int steps = 40, freeze = 15;
  std::vector<std::string> overrides = {"model.architecture=moe", "model.num_experts=4", "model.top_k=2",
                                        "parallel.ep=2", "training.lr=1e-3"};
  const TrainedRun exact = train(world, dir, overrides, steps, 2);
  overrides.push_back("training.optimizer=onebit_adam");
  overrides.push_back("training.freeze_step=" + std::to_string(freeze));
  const TrainedRun onebit = train(world, dir, overrides, steps, 2);
  for (int s = 0; s <= freeze; ++s) EXPECT_EQ(onebit.loss[s], exact.loss[s]) << "step " << s + 1;
  const double exact_final = mean_of_last(exact.loss, 10), onebit_final = mean_of_last(onebit.loss, 10);
  if (comm.rank() == 0) {
    std::cout << "1-bit Adam at ep 2: loss over the last 10 of " << steps << " steps " << onebit_final << " vs exact "
              << exact_final << "; bytes/step " << onebit.bytes.back() << " vs " << exact.bytes.back() << std::endl;
  }
  EXPECT_LT(exact_final, exact.loss.front() - 1.0) << "the runs must learn for the comparison to mean something";
  EXPECT_LT(std::fabs(onebit_final - exact_final), 0.10 * exact_final);
  EXPECT_NE(onebit_final, exact_final) << "the compressed phase must differ from the exact one";
  EXPECT_LT(onebit.bytes.back() * 2, exact.bytes.back());
}

// int8 and top-k at ZeRO 1, 2 and 3: every dense bucket's reduce-scatter is compressed, the error
// kept on the sender (compressed_gradients.h), the all-gathers exact. Against the exact run of the
// same stage: int8 within 1 %; top-10 % (which lags the exact curve early, see above) within 10 %
// of top-10 % at ZeRO 0, with fewer bytes.
TEST(GradientExchange, CompressionWithZeroTracksTheExactRunAtEveryStage) {
  World world;
  const fs::path dir = shared_dir(*world.comm, "compress_zero");
  const int steps = 60;
  const TrainedRun topk_zero0 =
      train(world, dir, {"training.gradient_compression=topk", "training.topk_ratio=0.1"}, steps);
  const double topk_reference = mean_of_last(topk_zero0.loss, 10);
  for (int stage : {1, 2, 3}) {
    const std::string zero = "parallel.zero_stage=" + std::to_string(stage);
    const TrainedRun exact = train(world, dir, {zero}, steps);
    const double exact_final = mean_of_last(exact.loss, 10);
    EXPECT_LT(exact_final, exact.loss.front() - 1.0) << "the runs must learn for the comparison to mean something";
    for (const std::string code : {"int8", "topk"}) {
      SCOPED_TRACE(code + " at ZeRO " + std::to_string(stage));
      std::vector<std::string> overrides = {"training.gradient_compression=" + code, zero};
      if (code == "topk") overrides.push_back("training.topk_ratio=0.1");
      const TrainedRun compressed = train(world, dir, overrides, steps);
      const double final_loss = mean_of_last(compressed.loss, 10);
      if (world.comm->rank() == 0) {
        std::cout << code << " at ZeRO " << stage << ": loss over the last 10 of " << steps << " steps " << final_loss
                  << " vs exact " << exact_final << "; bytes/step " << compressed.bytes.back() << " vs "
                  << exact.bytes.back() << " (top-k at ZeRO 0: " << topk_reference << ")" << std::endl;
      }
      if (code == "int8") EXPECT_LT(std::fabs(final_loss - exact_final), 0.01 * exact_final);
      if (code == "topk") EXPECT_LT(std::fabs(final_loss - topk_reference), 0.10 * topk_reference);
      if (world.comm->size() > 1) {
        EXPECT_NE(final_loss, exact_final) << "the compressed run must differ from the exact one";
        EXPECT_LT(compressed.bytes.back(), exact.bytes.back()) << "the reduce-scatters send codes";
      }
    }
  }
}

TEST(LocalSgd, OneInnerStepWithPlainAveragingAveragesTheReplicasParameters) {
  World world;
  distributed::Communicator& comm = *world.comm;
  const fs::path dir = shared_dir(comm, "local_avg");
  auto one_step = [&](const std::vector<std::string>& overrides) {
    RunConfig config = config_for(comm.rank(), dir, "gpt2", comm.size(), 0, 1);
    config.training.steps = 10;
    for (const std::string& o : overrides) config.apply_override(o);
    prepare_shared_data(comm, config);
    distributed::ProcessGroups groups(distributed::GridShape{.dp = comm.size()}, world.runtime.world());
    Engine engine(config, make_rank_logger(comm.rank(), "warn"), &groups);
    engine.step();
    return engine.model().parameters().flat_values().clone();
  };
  const Tensor own = one_step({"training.sync=local", "training.local_steps=9"});  // no outer step yet
  const Tensor averaged =
      one_step({"training.sync=local", "training.local_steps=1", "training.outer_lr=1", "training.outer_momentum=0"});
  const std::int64_t n = own.numel();
  std::vector<float> all(static_cast<std::size_t>(n * comm.size()));
  MPI_Allgather(own.data<float>(), static_cast<int>(n), MPI_FLOAT, all.data(), static_cast<int>(n), MPI_FLOAT,
                MPI_COMM_WORLD);
  double worst = 0.0, spread = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    double mean = 0.0;
    for (int r = 0; r < comm.size(); ++r) mean += all[static_cast<std::size_t>(r * n + i)];
    mean /= comm.size();
    worst = std::max(worst, std::fabs(averaged.data<float>()[i] - mean));
    spread = std::max(spread, std::fabs(static_cast<double>(own.data<float>()[i]) - mean));
  }
  EXPECT_LT(worst, 1e-6);  // f32 rounding of anchor - mean(anchor - theta_r)
  if (comm.size() > 1) EXPECT_GT(spread, 1e-4) << "the replicas must differ for the average to be checked";
  const std::vector<std::uint64_t> hashes = myriad::testing::hashes_on_all_ranks(averaged);
  for (int r = 1; r < comm.size(); ++r) EXPECT_EQ(hashes[r], hashes[0]) << "replica " << r << " differs";
}

// Local SGD with H = 1 equals synchronous training when the inner update is linear in the
// gradient: AdamW with eps far above sqrt(v) (1e8: sqrt(v) + eps rounds to eps in f32) is SGD with
// bias-corrected momentum, lr / eps = 0.1; no weight decay and no clipping (clipping acts on each
// replica's own norm). Then the mean of the replicas' momenta is the synchronous momentum, and
// averaging the replicas' parameters gives the synchronous step up to f32 rounding. With
// AdamW's usual eps the same runs differ (the test below), so the comparison can fail.
TEST(LocalSgd, OneInnerStepWithALinearInnerUpdateEqualsSynchronousTraining) {
  World world;
  const fs::path dir = shared_dir(*world.comm, "local_linear");
  const int steps = 30;
  const std::vector<std::string> momentum_sgd = {"training.lr=1e7", "training.adam_eps=1e8", "training.weight_decay=0",
                                                 "training.grad_clip=0"};
  auto with = [](std::vector<std::string> a, const std::vector<std::string>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const std::vector<std::string> h1 = {"training.sync=local", "training.local_steps=1", "training.outer_lr=1",
                                       "training.outer_momentum=0"};
  const TrainedRun sync = train(world, dir, momentum_sgd, steps);
  const TrainedRun local = train(world, dir, with(momentum_sgd, h1), steps);
  double gap = 0.0;
  for (int s = 0; s < steps; ++s) gap = std::max(gap, std::fabs(sync.loss[s] - local.loss[s]));
  const double learned = sync.loss.front() - sync.loss.back();
  if (world.comm->rank() == 0) {
    std::cout << "local SGD H=1 with a linear inner update: max |sync - local| = " << gap << " over " << steps
              << " steps (loss fell by " << learned << ")" << std::endl;
  }
  EXPECT_GT(learned, 0.1) << "the runs must train for the comparison to mean something";
  EXPECT_LT(gap, 1e-4);
  if (world.comm->size() > 1) {
    const std::vector<std::string> adamw = {"training.lr=1e-3", "training.grad_clip=0"};
    const TrainedRun adam_sync = train(world, dir, adamw, steps);
    const TrainedRun adam_local = train(world, dir, with(adamw, h1), steps);
    double adam_gap = 0.0;
    for (int s = 0; s < steps; ++s) adam_gap = std::max(adam_gap, std::fabs(adam_sync.loss[s] - adam_local.loss[s]));
    if (world.comm->rank() == 0) std::cout << "with AdamW's eps: max |sync - local| = " << adam_gap << std::endl;
    EXPECT_GT(adam_gap, 1e-3) << "with AdamW's own eps the runs must differ (the comparison can fail)";
  }
}

// The same at ep 2 (a mixture of experts, 4 experts, top 2): the dense parameters are averaged
// over dp and the experts over the expert-data group, and each expert steps on the mean gradient of
// the ep group's tokens (local_sgd_exchange.h) — synchronous training of the layout again, up to
// f32 rounding; averaging the experts over dp instead, or skipping the 1/ep, would not be.
TEST(LocalSgd, WithExpertParallelismAndALinearInnerUpdateEqualsSynchronousTraining) {
  World world;
  if (world.comm->size() % 2 != 0) GTEST_SKIP() << "ep 2 needs an even world";
  const fs::path dir = shared_dir(*world.comm, "local_linear_ep");
  const int steps = 15;
  const std::vector<std::string> moe_momentum_sgd = {
      "model.architecture=moe", "model.num_experts=4",   "model.top_k=2",           "parallel.ep=2",
      "training.lr=1e7",        "training.adam_eps=1e8", "training.weight_decay=0", "training.grad_clip=0"};
  std::vector<std::string> local = moe_momentum_sgd;
  for (const char* o :
       {"training.sync=local", "training.local_steps=1", "training.outer_lr=1", "training.outer_momentum=0"}) {
    local.emplace_back(o);
  }
  const TrainedRun sync = train(world, dir, moe_momentum_sgd, steps, 2);
  const TrainedRun averaged = train(world, dir, local, steps, 2);
  double gap = 0.0;
  for (int s = 0; s < steps; ++s) gap = std::max(gap, std::fabs(sync.loss[s] - averaged.loss[s]));
  const double learned = sync.loss.front() - sync.loss.back();
  if (world.comm->rank() == 0) {
    std::cout << "local SGD H=1 at ep 2 with a linear inner update: max |sync - local| = " << gap << " over " << steps
              << " steps (loss fell by " << learned << ")" << std::endl;
  }
  EXPECT_GT(learned, 0.1) << "the runs must train for the comparison to mean something";
  EXPECT_LT(gap, 1e-4);
}

// With one inner step and plain averaging, local SGD averages AdamW *updates* where synchronous
// training takes the AdamW update of the averaged gradient: the same for SGD, not for an adaptive
// inner optimizer (AdamW's first step is lr * sign(g) per element). So they track each other
// within a band, not bit for bit.
TEST(LocalSgd, OneInnerStepTracksSynchronousTrainingAndLongerRoundsSendLess) {
  World world;
  const fs::path dir = shared_dir(*world.comm, "local_track");
  const int steps = 120;
  const TrainedRun exact = train(world, dir, {"training.lr=1e-3"}, steps);
  const TrainedRun every = train(world, dir,
                                 {"training.lr=1e-3", "training.sync=local", "training.local_steps=1",
                                  "training.outer_lr=1", "training.outer_momentum=0"},
                                 steps);
  const TrainedRun rounds =
      train(world, dir, {"training.lr=1e-3", "training.sync=local", "training.local_steps=8"}, steps);
  const double exact_final = mean_of_last(exact.loss, 10), every_final = mean_of_last(every.loss, 10),
               rounds_final = mean_of_last(rounds.loss, 10);
  if (world.comm->rank() == 0) {
    std::cout << "local SGD: exact " << exact_final << ", H=1 averaging " << every_final << ", H=8 DiLoCo "
              << rounds_final << "; bytes at a sync step " << rounds.bytes[7] << ", between " << rounds.bytes[3]
              << std::endl;
  }
  EXPECT_LT(std::fabs(every_final - exact_final), 0.08 * exact_final);  // measured +3.9 % at dp 2
  EXPECT_LT(rounds_final, exact.loss.front() - 2.0) << "H = 8 must still learn";
  if (world.comm->size() > 1) {
    for (int s = 0; s < steps; ++s) {
      if ((s + 1) % 8 == 0) {
        EXPECT_GT(rounds.bytes[s], exact.bytes[s] / 2) << "step " << s + 1 << " is an outer step";
      } else {
        EXPECT_LT(rounds.bytes[s], 1000) << "step " << s + 1 << " is local: scalars only";
      }
    }
  }
}

// A checkpoint is a consolidation point: a run resumed from it continues exactly like the run
// that wrote it (the outer momentum is in the checkpoint), with and without the overlap.
TEST(LocalSgd, ResumesExactlyFromACheckpoint) {
  for (const std::string overlap : {"false", "true"}) {
    SCOPED_TRACE("outer_overlap " + overlap);
    World world;
    distributed::Communicator& comm = *world.comm;
    const fs::path dir = shared_dir(comm, "local_resume_" + overlap);
    RunConfig config = config_for(comm.rank(), dir, "gpt2", comm.size(), 0, 1);
    config.training.steps = 24;
    for (const std::string& o : {std::string("training.sync=local"), std::string("training.local_steps=4"),
                                 "training.outer_overlap=" + overlap}) {
      config.apply_override(o);
    }
    prepare_shared_data(comm, config);
    std::vector<double> continued, resumed;
    {
      distributed::ProcessGroups groups(distributed::GridShape{.dp = comm.size()}, world.runtime.world());
      Engine engine(config, make_rank_logger(comm.rank(), "warn"), &groups);
      for (int s = 0; s < 10; ++s) engine.step();  // mid-round: 10 % 4 != 0
      engine.save();
      for (int s = 0; s < 8; ++s) continued.push_back(engine.step().loss);
    }
    {
      distributed::ProcessGroups groups(distributed::GridShape{.dp = comm.size()}, world.runtime.world());
      Engine engine(config, make_rank_logger(comm.rank(), "warn"), &groups);
      engine.load("auto");
      EXPECT_EQ(engine.step_count(), 10);
      for (int s = 0; s < 8; ++s) resumed.push_back(engine.step().loss);
    }
    for (int s = 0; s < 8; ++s) EXPECT_EQ(resumed[s], continued[s]) << "step " << 11 + s;
  }
}

}  // namespace
}  // namespace myriad::train
