// Mixed precision on the CPU path: rounding to bf16 / fp16 values, the dynamic loss scaler, and
// the engine with training.precision bf16 and fp16 — the model computes with weights (and a
// residual stream) rounded to the format while the fp32 master weights take the updates; fp16
// overflow skips the step and halves the scale; a resumed fp16 run continues bit for bit.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include "engine_fixtures.h"
#include "myriad/core/half.h"
#include "myriad/core/philox.h"
#include "myriad/core/precision.h"
#include "myriad/train/engine.h"
#include "myriad/train/loss_scaler.h"
#include "reference.h"

namespace myriad::train {
namespace {

using namespace fixtures;

TEST(Precision, RoundingGivesTheNearestValueOfTheFormat) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Tensor x = Tensor::empty({4096});
  fill_normal(x, 0.0f, 3.0f, seed, 1);
  x.data<float>()[0] = 70000.0f;           // beyond fp16's largest finite value (65504)
  x.data<float>()[1] = 65504.0f;           // fp16's largest
  x.data<float>()[2] = 1e-9f;              // below fp16's smallest subnormal (~6e-8): rounds to 0
  x.data<float>()[3] = 1.0f + 1.0f / 512;  // between two bf16 neighbours 1 and 1 + 1/128: to 1
  Tensor b = x.clone(), h = x.clone(), f = x.clone();
  round_to_precision(b, DType::bf16);
  round_to_precision(h, DType::f16);
  round_to_precision(f, DType::f32);
  EXPECT_EQ(std::memcmp(f.raw_data(), x.raw_data(), x.nbytes()), 0);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    const float v = x.data<float>()[i], rb = b.data<float>()[i], rh = h.data<float>()[i];
    EXPECT_EQ(float_bits(rb) & 0xffffu, 0u) << "bf16 keeps 8 mantissa bits, value " << v;
    EXPECT_LE(std::abs(rb - v), std::ldexp(std::abs(v), -8)) << v;  // half an ulp of 2^-7
    if (std::abs(v) <= 65504.0f && std::abs(v) >= 6.2e-5f)
      EXPECT_LE(std::abs(rh - v), std::ldexp(std::abs(v), -11)) << v;
    Tensor again = Tensor::full({1}, rh);
    round_to_precision(again, DType::f16);
    EXPECT_EQ(again.data<float>()[0], rh) << "an fp16 value rounds to itself";
  }
  EXPECT_TRUE(std::isinf(h.data<float>()[0]));
  EXPECT_EQ(h.data<float>()[1], 65504.0f);
  EXPECT_EQ(h.data<float>()[2], 0.0f);
  EXPECT_EQ(b.data<float>()[3], 1.0f);
  Tensor ints = Tensor::zeros({3}, DType::i32);
  EXPECT_THROW(round_to_precision(ints, DType::bf16), Error);
}

TEST(Precision, LossScalerHalvesOnOverflowAndGrowsAfterAWindow) {
  DynamicLossScaler scaler({.initial = 64, .growth = 2, .backoff = 0.5, .window = 3, .min_scale = 8});
  EXPECT_FALSE(scaler.update(false));
  EXPECT_EQ(scaler.scale(), 32);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 32);
  EXPECT_EQ(scaler.finite_steps(), 2);
  EXPECT_TRUE(scaler.update(true));  // the third finite step in a row
  EXPECT_EQ(scaler.scale(), 64);
  EXPECT_EQ(scaler.finite_steps(), 0);
  for (int i = 0; i < 5; ++i) scaler.update(false);
  EXPECT_EQ(scaler.scale(), 8) << "never below min_scale";
  scaler.restore(16, 2);
  EXPECT_TRUE(scaler.update(true));
  EXPECT_EQ(scaler.scale(), 32);
  EXPECT_THROW(scaler.restore(4, 0), Error);
  EXPECT_THROW(DynamicLossScaler({.initial = 1, .min_scale = 2}), Error);
}

std::vector<double> losses(Engine& engine, int steps, std::vector<StepMetrics>* all = nullptr) {
  std::vector<double> out;
  for (int s = 0; s < steps; ++s) {
    StepMetrics m = engine.step();
    out.push_back(m.loss);
    if (all) all->push_back(m);
  }
  return out;
}

bool all_representable(const Tensor& values, DType format) {
  Tensor rounded = values.clone();
  round_to_precision(rounded, format);
  return std::memcmp(rounded.raw_data(), values.raw_data(), values.nbytes()) == 0;
}

// bf16: the weights the model multiplies are bf16 values, the master weights are not; the loss
// curve follows fp32's closely (bf16 keeps 8 bits of mantissa: differences of ~1e-2 after 20
// steps here; a broken master/compute split diverges or stalls).
TEST(Precision, Bf16TrainsWithFp32MasterWeights) {
  const fs::path dir = fresh_dir("bf16");
  const std::string corpus = write_corpus(dir);
  RunConfig config = tiny_config(dir, corpus);
  Engine reference(config, quiet_logger());
  const std::vector<double> fp32 = losses(reference, 20);
  config.training.precision = Precision::bf16;
  Engine engine(config, quiet_logger());
  const std::vector<double> bf16 = losses(engine, 20);
  const nn::ParameterStore& store = engine.model().parameters();
  EXPECT_FALSE(all_representable(const_cast<nn::ParameterStore&>(store).flat_values(), DType::bf16))
      << "the master weights must keep fp32 precision";
  for (const nn::Parameter& p : store.all()) {
    EXPECT_TRUE(all_representable(p.value.contiguous(), DType::bf16)) << p.name << " is not bf16 in the model";
  }
  double worst = 0.0;
  for (int s = 0; s < 20; ++s) worst = std::max(worst, std::abs(bf16[s] - fp32[s]));
  std::cout << "bf16 vs fp32 loss over 20 steps: max gap " << worst << " (" << fp32.front() << " -> " << fp32.back()
            << " vs " << bf16.back() << ")" << std::endl;
  EXPECT_GT(worst, 0.0) << "bf16 must change the arithmetic";
  EXPECT_LT(worst, 0.05);
  EXPECT_LT(bf16.back(), bf16.front() - 0.5);
  fs::remove_all(dir);
}

// fp16 starting from a loss scale of 2^32: the scaled gradients overflow fp16, so the first
// steps are skipped — weights untouched, the scale halved each time — until the scale fits; then
// training proceeds. A checkpoint taken after the skips resumes bit for bit (AdamW's step count
// and the scaler's state are in it).
TEST(Precision, Fp16OverflowSkipsTheStepAndHalvesTheScale) {
  const fs::path dir = fresh_dir("fp16");
  const std::string corpus = write_corpus(dir);
  RunConfig config = tiny_config(dir, corpus);
  config.training.precision = Precision::fp16;
  config.training.initial_loss_scale = std::ldexp(1.0, 32);
  config.training.loss_scale_window = 4;
  Engine engine(config, quiet_logger());
  const std::vector<double> start = testing::to_f64(engine.model().parameters().flat_values());
  std::vector<StepMetrics> steps;
  losses(engine, 1, &steps);
  EXPECT_TRUE(steps[0].skipped);
  EXPECT_EQ(testing::to_f64(engine.model().parameters().flat_values()), start) << "a skipped step changed weights";
  losses(engine, 11, &steps);
  int skipped = 0;
  for (std::size_t s = 0; s < steps.size(); ++s) {
    if (!steps[s].skipped) break;
    ++skipped;
    EXPECT_EQ(steps[s].loss_scale, std::ldexp(1.0, 32 - static_cast<int>(s))) << "step " << s + 1;
  }
  ASSERT_GT(skipped, 0);
  ASSERT_LT(skipped, 12) << "the scale never came down far enough";
  std::cout << "fp16 from scale 2^32: " << skipped << " skipped steps, training from scale "
            << steps[static_cast<std::size_t>(skipped)].loss_scale << std::endl;
  for (std::size_t s = static_cast<std::size_t>(skipped); s < steps.size(); ++s) {
    EXPECT_FALSE(steps[s].skipped) << "step " << s + 1 << " overflowed after the scale had settled";
  }
  // After the first finite step: a window of 4 finite steps doubles the scale again.
  const double trained_at = steps[static_cast<std::size_t>(skipped)].loss_scale;
  if (skipped + 4 < 12) EXPECT_EQ(steps[static_cast<std::size_t>(skipped + 4)].loss_scale, 2 * trained_at);
  const std::string path = engine.save();
  std::vector<double> straight = losses(engine, 8);
  EXPECT_LT(straight.back(), steps.front().loss - 0.3) << "fp16 training must learn once the scale fits";
  Engine resumed(config, quiet_logger());
  resumed.load(path);
  EXPECT_EQ(losses(resumed, 8), straight) << "a resumed fp16 run continues bit for bit";
  fs::remove_all(dir);
}

// ZeRO-3 keeps only the f32 shard; each unit it gathers is rounded to the compute format
// (DataParallelOptions::compute_format), so bf16 at ZeRO 3 trains like bf16 at ZeRO 1 (whose
// compute copy is rounded after every update): the same losses and gradient norms.
// The weights the model computes with under bf16: at ZeRO 0 the update writes them in its own
// pass (the rounded f32 copy and the 16-bit GEMM operands); at ZeRO 1 a refresh follows the
// update. Either way, after every step each parameter's copies are its master value rounded, bit
// for bit, and the two runs' losses agree (a copy one update behind would not).
TEST(Precision, Bf16ComputeCopiesFollowTheMasterWeightsAtEveryStep) {
  const fs::path dir = fresh_dir("bf16_copies");
  RunConfig config = tiny_config(dir, write_corpus(dir));
  config.training.precision = Precision::bf16;
  config.parallel.zero_stage = 0;
  Engine fused(config, quiet_logger());
  config.parallel.zero_stage = 1;
  Engine refreshed(config, quiet_logger());
  EXPECT_TRUE(fused.optimizer().writes_compute_copies());
  EXPECT_FALSE(refreshed.optimizer().writes_compute_copies());
  for (int step = 0; step < 5; ++step) {
    const StepMetrics a = fused.step(), b = refreshed.step();
    EXPECT_NEAR(a.loss, b.loss, 1e-6 * b.loss) << "step " << step;
    for (Engine* engine : {&fused, &refreshed}) {
      nn::ParameterStore& store = engine->model().parameters();
      for (const nn::Parameter& p : store.all()) {
        ASSERT_TRUE(p.operand.defined()) << p.name;
        ASSERT_EQ(p.operand.dtype(), DType::bf16) << p.name;
        Tensor master = Tensor::from_storage(store.flat_values().storage(), p.shape, contiguous_strides(p.shape),
                                             store.flat_values().offset() + p.offset, DType::f32)
                            .clone();
        Tensor narrow = Tensor::empty(p.shape, DType::bf16);
        narrow.copy_from(master);
        ASSERT_EQ(std::memcmp(p.operand.raw_data(), narrow.raw_data(), narrow.nbytes()), 0)
            << p.name << " at step " << step << " (zero_stage " << engine->config().parallel.zero_stage << ")";
        round_to_precision(master, DType::bf16);
        ASSERT_EQ(std::memcmp(p.value.raw_data(), master.raw_data(), master.nbytes()), 0) << p.name;
      }
    }
  }
  fs::remove_all(dir);
}

TEST(Precision, Bf16AtZero3MatchesBf16AtZero1) {
  const fs::path dir = fresh_dir("bf16_zero3");
  RunConfig config = tiny_config(dir, write_corpus(dir));
  config.training.precision = Precision::bf16;
  config.parallel.zero_stage = 1;
  Engine zero1(config, quiet_logger());
  config.parallel.zero_stage = 3;
  Engine zero3(config, quiet_logger());
  for (int step = 0; step < 4; ++step) {
    const StepMetrics want = zero1.step(), got = zero3.step();
    EXPECT_NEAR(got.loss, want.loss, 1e-5 * want.loss) << "step " << step;
    EXPECT_NEAR(got.grad_norm, want.grad_norm, 1e-4 * want.grad_norm) << "step " << step;
  }
  EXPECT_NEAR(zero3.evaluate(), zero1.evaluate(), 1e-5 * zero1.evaluate());
  fs::remove_all(dir);
}

}  // namespace
}  // namespace myriad::train
