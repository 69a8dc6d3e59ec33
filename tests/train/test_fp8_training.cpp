// training.precision fp8 on the CPU path (the numbers a Hopper computes, for checking): the
// transformer blocks' linear layers on FP8 GEMMs with delayed scaling while everything else is
// bf16. Its loss curve (60 steps: the tiny model learning from 5.8 to 3.8) stays within 2 % of
// bf16's; after each step every scale is the power of two the recipe gives for the step's amaxes;
// a resumed run continues bit for bit (the scaling state is in the checkpoint); a checkpoint
// without it (a bf16 run's, or one of another amax history length) starts the scales over.
#include <gtest/gtest.h>

#include <cmath>

#include "engine_fixtures.h"
#include "myriad/train/engine.h"

namespace myriad::train {
namespace {

using namespace fixtures;

std::vector<double> step_losses(Engine& engine, int steps) {
  std::vector<double> out;
  for (int s = 0; s < steps; ++s) out.push_back(engine.step().loss);
  return out;
}

TEST(Fp8Training, LossCurveStaysWithinTwoPercentOfBf16) {
  const fs::path dir = fresh_dir("fp8_curve");
  RunConfig config = tiny_config(dir, write_corpus(dir));
  config.training.precision = Precision::bf16;
  Engine bf16_engine(config, quiet_logger());
  config.training.precision = Precision::fp8;
  Engine fp8_engine(config, quiet_logger());
  const int steps = 60;
  const std::vector<double> bf16 = step_losses(bf16_engine, steps), fp8 = step_losses(fp8_engine, steps);
  double worst = 0.0, differs = 0.0;
  for (int s = 0; s < steps; ++s) {
    worst = std::max(worst, std::abs(fp8[s] - bf16[s]) / bf16[s]);
    differs = std::max(differs, std::abs(fp8[s] - bf16[s]));
  }
  std::cout << "fp8 vs bf16 over " << steps << " steps: worst relative gap " << worst << " (" << bf16.front() << " -> "
            << bf16.back() << " vs " << fp8.back() << ")" << std::endl;
  EXPECT_GT(differs, 0.0) << "fp8 must change the arithmetic";
  EXPECT_LT(worst, 0.02);
  EXPECT_LT(fp8.back(), fp8.front() - 0.5) << "fp8 training must learn";
  fs::remove_all(dir);
}

TEST(Fp8Training, EveryScaleIsThePowerOfTwoOfItsHistory) {
  const fs::path dir = fresh_dir("fp8_scales");
  RunConfig config = tiny_config(dir, write_corpus(dir));
  config.training.precision = Precision::fp8;
  config.training.fp8_amax_history = 2;
  config.training.fp8_margin = 1;
  Engine engine(config, quiet_logger());
  step_losses(engine, 2);
  const StepMetrics metrics = engine.step();
  EXPECT_GE(metrics.fp8_saturated, 0) << "fp8 steps count the tensors their scales clipped";
  EXPECT_NE(step_metrics_json(metrics).find("\"fp8_saturated\""), std::string::npos);
  const nn::Fp8Scaling* scaling = engine.model().fp8_scaling();
  ASSERT_NE(scaling, nullptr);
  const Tensor state = scaling->state();
  const std::int64_t slots = scaling->linears() * nn::kFp8Roles, H = 2;
  const float* scales = state.data<float>();
  const float* history = scales + slots;
  int used = 0;
  for (std::int64_t s = 0; s < slots; ++s) {
    const float largest = std::max(history[s * H], history[s * H + 1]);
    if (largest == 0.0f) {
      EXPECT_EQ(scales[s], 1.0f) << "slot " << s << " (a GELU block has no 'up' layer)";
      continue;
    }
    ++used;
    const double max_finite = s % nn::kFp8Roles == 2 ? 57344.0 : 448.0;
    const double want = std::ldexp(1.0, static_cast<int>(std::floor(std::log2(max_finite / largest))) - 1);
    EXPECT_EQ(static_cast<double>(scales[s]), want) << "slot " << s;
  }
  EXPECT_EQ(used, 2 * 4 * nn::kFp8Roles) << "2 GPT-2 blocks x 4 linear layers x 3 tensors";
  fs::remove_all(dir);
}

TEST(Fp8Training, ResumeContinuesBitForBit) {
  const fs::path dir = fresh_dir("fp8_resume");
  RunConfig config = tiny_config(dir, write_corpus(dir));
  config.training.precision = Precision::fp8;
  Engine engine(config, quiet_logger());
  step_losses(engine, 4);
  const std::string path = engine.save();
  const std::vector<double> straight = step_losses(engine, 4);
  Engine resumed(config, quiet_logger());
  resumed.load(path);
  EXPECT_EQ(step_losses(resumed, 4), straight) << "a resumed fp8 run continues bit for bit";
  fs::remove_all(dir);
}

TEST(Fp8Training, ABf16CheckpointStartsTheScalesOver) {
  const fs::path dir = fresh_dir("fp8_from_bf16");
  RunConfig config = tiny_config(dir, write_corpus(dir));
  config.training.precision = Precision::bf16;
  Engine bf16_engine(config, quiet_logger());
  step_losses(bf16_engine, 1);
  const StepMetrics bf16_metrics = bf16_engine.step();
  EXPECT_EQ(bf16_metrics.fp8_saturated, -1);
  EXPECT_EQ(step_metrics_json(bf16_metrics).find("fp8_saturated"), std::string::npos) << "only fp8 runs report it";
  const std::string path = bf16_engine.save();
  config.training.precision = Precision::fp8;
  Engine fp8_engine(config, quiet_logger());
  fp8_engine.load(path);
  const double loss = fp8_engine.step().loss;
  EXPECT_TRUE(std::isfinite(loss));
  EXPECT_LT(std::abs(loss - bf16_engine.step().loss) / loss, 0.02) << "fp8 continues the bf16 run";
  // An fp8 checkpoint resumed with another amax history length: the weights load, the scales
  // start over (the state's shape is the recipe's).
  const std::string fp8_path = fp8_engine.save();
  config.training.fp8_amax_history = 4;
  Engine longer(config, quiet_logger());
  longer.load(fp8_path);
  EXPECT_TRUE(std::isfinite(longer.step().loss));
  EXPECT_EQ(longer.model().fp8_scaling()->state().numel(), longer.model().fp8_scaling()->linears() * 3 * (1 + 4));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace myriad::train
