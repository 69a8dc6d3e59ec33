// Fp8Scaling against a float64 reference of the delayed-scaling recipe: over a sequence of steps
// with random amaxes (several ranks' maxima, zeros, non-finite steps), every scale equals
// 2^(floor(log2(max_finite / max(history))) - margin) for its format; an unseen slot is scaled
// just in time from its tensor; the state round-trips and refuses another history length; the
// scales and their reciprocals the ops read (scale_slot, dequant_slot) follow every change.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>

#include "myriad/core/philox.h"
#include "myriad/nn/fp8_scaling.h"
#include "myriad/nn/transformer_block.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad::nn {
namespace {

using namespace myriad::testing;

double reference_scale(double amax, double max_finite, int margin) {
  return std::ldexp(1.0, static_cast<int>(std::floor(std::log2(max_finite / amax))) - margin);
}

TEST(Fp8Scaling, FollowsTheDelayedRecipeOverSteps) {
  const std::uint64_t seed = fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t linears = 3, history = 4;
  for (int margin : {0, 2}) {
    SCOPED_TRACE("margin " + std::to_string(margin));
    Fp8Scaling scaling(Fp8Recipe{.amax_history = history, .margin = margin}, linears, {});
    const auto slots = static_cast<std::size_t>(linears * kFp8Roles);
    std::vector<std::deque<double>> reference_history(slots);
    std::vector<double> reference_scales(slots, 0.0);  // 0: not known yet
    for (std::uint64_t step = 0; step < 12; ++step) {
      // This rank's amaxes and another rank's (the reduction's other operand).
      std::vector<float> mine(slots), other(slots);
      for (std::size_t s = 0; s < slots; ++s) {
        const double u = philox_uniform(seed, step, s);
        mine[s] = static_cast<float>(std::exp2(-12.0 + 24.0 * u));
        other[s] = static_cast<float>(std::exp2(-12.0 + 24.0 * philox_uniform(seed, step + 100, s)));
        if (s == 1 && step % 5 == 2) mine[s] = other[s] = 0.0f;  // a tensor that was all zeros
        if (s == 4 && step == 6) mine[s] = NAN;                  // a non-finite step
      }
      for (std::int64_t l = 0; l < linears; ++l) {
        for (int r = 0; r < kFp8Roles; ++r) {
          Tensor slot = scaling.amax_slot(l, static_cast<Fp8Role>(r));
          slot.data<float>()[0] = mine[static_cast<std::size_t>(l * kFp8Roles + r)];
        }
      }
      scaling.end_step([&](Tensor& amax) {
        ASSERT_EQ(amax.numel(), static_cast<std::int64_t>(slots));
        float* a = amax.data<float>();
        for (std::size_t s = 0; s < slots; ++s) a[s] = std::isnan(a[s]) ? NAN : std::max(a[s], other[s]);
      });
      for (std::size_t s = 0; s < slots; ++s) {
        const double reduced = std::isnan(mine[s]) ? NAN : std::max(mine[s], other[s]);
        if (std::isfinite(reduced) && reduced > 0) {
          reference_history[s].push_back(reduced);
          if (static_cast<std::int64_t>(reference_history[s].size()) > history) reference_history[s].pop_front();
        }
        if (!reference_history[s].empty()) {
          const double largest = *std::max_element(reference_history[s].begin(), reference_history[s].end());
          const double max_finite = s % kFp8Roles == 2 ? 57344.0 : 448.0;
          reference_scales[s] = reference_scale(largest, max_finite, margin);
        }
        const auto role = static_cast<Fp8Role>(s % kFp8Roles);
        const std::int64_t linear = static_cast<std::int64_t>(s) / kFp8Roles;
        ASSERT_EQ(static_cast<double>(scaling.scale(linear, role, Tensor::zeros({1}))), reference_scales[s])
            << "step " << step << " slot " << s;
        ASSERT_EQ(scaling.amax_slot(linear, role).data<float>()[0], 0.0f) << "the step's amax is cleared";
        // What the ops read: the scale and its reciprocal in the placement's buffers.
        ASSERT_EQ(static_cast<double>(scaling.scale_slot(linear, role).data<float>()[0]), reference_scales[s]);
        ASSERT_EQ(static_cast<double>(scaling.dequant_slot(linear, role).data<float>()[0]), 1.0 / reference_scales[s]);
      }
    }
  }
}

TEST(Fp8Scaling, AnUnseenSlotIsScaledJustInTimeFromItsTensor) {
  Fp8Scaling scaling(Fp8Recipe{}, 2, {});
  Tensor x = Tensor::full({3, 5}, 0.25);
  x.data<float>()[7] = -3.0f;  // amax 3: 448 / 3 = 149.3 -> 2^7
  EXPECT_EQ(scaling.scale(1, Fp8Role::input, x), 128.0f);
  EXPECT_EQ(scaling.scale_slot(1, Fp8Role::input).data<float>()[0], 128.0f) << "the ops read it at once";
  EXPECT_EQ(scaling.dequant_slot(1, Fp8Role::input).data<float>()[0], 1.0f / 128.0f);
  EXPECT_EQ(scaling.scale(1, Fp8Role::input, Tensor::full({1}, 1000.0)), 128.0f) << "kept for the step";
  Tensor g = Tensor::full({4}, 1e-3);  // 57344 / 1e-3 = 5.7e7 -> 2^25
  EXPECT_EQ(scaling.scale(0, Fp8Role::grad, g), std::ldexp(1.0f, 25));
  EXPECT_EQ(scaling.scale(0, Fp8Role::weight, Tensor::zeros({4})), 1.0f) << "an all-zero tensor keeps scale 1";
  EXPECT_EQ(scaling.amax_slot(1, Fp8Role::input).data<float>()[0], 0.0f) << "measuring records nothing";
}

// A step whose amax outgrew the delayed scale's range is reported (worst first), as the values
// that saturated; a step within range, or a just-in-time scale, reports nothing.
TEST(Fp8Scaling, ReportsTheTensorsWhoseAmaxOutgrewTheirRange) {
  Fp8Scaling scaling(Fp8Recipe{.amax_history = 2}, 3, {});
  // Slot (0, input) scaled just in time from this rank's tensor (amax 0.5: range 0.875); the
  // world's amax of 1.0 came from another rank's tensor, which its own scale covered: not judged.
  EXPECT_EQ(scaling.scale(0, Fp8Role::input, Tensor::full({2}, 0.5)), 512.0f);
  for (std::int64_t l = 0; l < 3; ++l) scaling.amax_slot(l, Fp8Role::input).data<float>()[0] = 1.0f;
  scaling.amax_slot(2, Fp8Role::grad).data<float>()[0] = 1e-3f;
  EXPECT_TRUE(scaling.end_step([](Tensor&) {}).empty()) << "no delayed scale yet: nothing to exceed";
  // Scales now: input 2^8 (range 1.75), grad 2^25 (range 1.7e-3).
  scaling.amax_slot(0, Fp8Role::input).data<float>()[0] = 1.5f;  // within range
  scaling.amax_slot(1, Fp8Role::input).data<float>()[0] = 3.0f;  // 1.7x the range
  scaling.amax_slot(2, Fp8Role::grad).data<float>()[0] = 0.1f;   // 58x
  const std::vector<Fp8Saturation> report = scaling.end_step([](Tensor&) {});
  ASSERT_EQ(report.size(), 2u);
  EXPECT_EQ(report[0].linear, 2);
  EXPECT_EQ(report[0].role, Fp8Role::grad);
  EXPECT_EQ(report[0].amax, 0.1f);
  EXPECT_EQ(report[0].range, 57344.0f / std::ldexp(1.0f, 25));
  EXPECT_EQ(report[1].linear, 1);
  EXPECT_EQ(report[1].range, 448.0f / 256.0f);
  EXPECT_TRUE(scaling.end_step([](Tensor&) {}).empty()) << "the next step's scales cover the history";
}

TEST(Fp8Scaling, SlotsAreNamedByTheirLayersWeight) {
  TransformerConfig gpt2 = TransformerConfig::gpt2(320, 4, 2, 32, 32);
  EXPECT_EQ(fp8_tensor_name(gpt2, 2 * kFp8LinearsPerBlock + 2, Fp8Role::input), "the input of blocks.2.mlp.fc.weight");
  EXPECT_EQ(fp8_tensor_name(gpt2, 4, Fp8Role::grad), "the output gradient of blocks.0.mlp.proj.weight");
  gpt2.mlp = MlpKind::swiglu;
  EXPECT_EQ(fp8_tensor_name(gpt2, 3 * kFp8LinearsPerBlock, Fp8Role::weight), "blocks.3.attn.qkv.weight");
  EXPECT_EQ(fp8_tensor_name(gpt2, 9, Fp8Role::weight), "blocks.1.mlp.down.weight");
}

TEST(Fp8Scaling, StateRoundTripsAndRefusesAnotherHistoryLength) {
  Fp8Scaling a(Fp8Recipe{.amax_history = 3}, 2, {});
  a.amax_slot(0, Fp8Role::weight).data<float>()[0] = 0.5f;
  a.amax_slot(1, Fp8Role::grad).data<float>()[0] = 2e-4f;
  a.end_step([](Tensor&) {});
  Fp8Scaling b(Fp8Recipe{.amax_history = 3}, 2, {});
  b.load_state(a.state());
  for (std::int64_t l = 0; l < 2; ++l) {
    for (int r = 0; r < kFp8Roles; ++r) {
      const auto role = static_cast<Fp8Role>(r);
      EXPECT_EQ(b.scale(l, role, Tensor::full({1}, 7.0)), a.scale(l, role, Tensor::full({1}, 7.0)));
    }
  }
  EXPECT_EQ(b.scale(0, Fp8Role::weight, Tensor::zeros({1})), 512.0f);  // 448 / 0.5 = 896 -> 2^9
  EXPECT_EQ(b.scale_slot(0, Fp8Role::weight).data<float>()[0], 512.0f) << "loaded into the ops' buffers";
  EXPECT_EQ(b.dequant_slot(1, Fp8Role::grad).data<float>()[0], 1.0f / a.scale(1, Fp8Role::grad, Tensor::zeros({1})));
  Fp8Scaling c(Fp8Recipe{.amax_history = 5}, 2, {});
  expect_error_naming([&] { c.load_state(a.state()); }, {"fp8_amax_history"});
  expect_error_naming([] { Fp8Scaling(Fp8Recipe{.amax_history = 0}, 1, {}); }, {"training.fp8_amax_history"});
}

}  // namespace
}  // namespace myriad::nn
