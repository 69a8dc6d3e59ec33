// 1-bit Adam's compressed phase against a float64 reference of Adam with the variance frozen at
// freeze_step: a few exact AdamW steps, then onebit_adam_step with an exact momentum sum (a group
// of one) must follow m = b1 m + (1 - b1) g, p -= lr (m / (1 - b1^t)) / (sqrt(v_f / (1 - b2^f)) + eps)
// with decoupled decay and the clipping scale; a non-finite norm skips without touching anything.
#include <gtest/gtest.h>

#include <cmath>

#include "myriad/core/philox.h"
#include "myriad/nn/parameter_store.h"
#include "myriad/optim/adamw_optimizer.h"
#include "myriad/optim/onebit_adam.h"
#include "reference.h"

namespace myriad::optim {
namespace {

TEST(OneBitAdam, FollowsAdamWithTheVarianceFrozenAtFreezeStep) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  nn::ParameterStore store;
  store.add("w", {5, 7}, nn::ParamKind::weight, nn::ParamInit::normal, 1.0f);
  store.add("b", {7}, nn::ParamKind::bias, nn::ParamInit::normal, 1.0f);
  store.allocate();
  store.initialize(seed);
  const AdamWConfig config{.beta1 = 0.9f, .beta2 = 0.95f, .eps = 1e-8f, .weight_decay = 0.1f, .grad_clip = 2.0f};
  AdamWOptimizer opt(store, config);
  const int freeze = 3;
  // Exact phase: the reference integrates the same AdamW steps in float64.
  const std::int64_t n = store.flat_values().numel();
  std::vector<double> p = testing::to_f64(store.flat_values()), m(n, 0.0), v(n, 0.0);
  auto decays = [&](std::int64_t i) { return i < 35; };  // the bias is excluded from decay
  const float lr = 0.01f;
  for (int t = 1; t <= 8; ++t) {
    fill_normal(store[0].grad, 0.0f, 1.0f, seed, 100 + t);
    fill_normal(store[1].grad, 0.0f, 1.0f, seed, 200 + t);
    const std::vector<double> g = testing::to_f64(store.flat_grads());
    double sum = 0.0;
    for (double x : g) sum += x * x;
    const double clip = std::min(1.0, 2.0 / std::sqrt(sum));
    if (t <= freeze) {
      opt.step(lr);
    } else {
      const OneBitAdamArgs args{lr, opt.grad_sum_squares(), 1.0f, 1, freeze};
      const OptimizerStepStats stats = onebit_adam_step(opt, args, [](Tensor&) {});
      EXPECT_NEAR(stats.clip_scale, clip, 1e-6);
    }
    for (std::int64_t i = 0; i < n; ++i) {
      const double gi = g[i] * clip;
      m[i] = 0.9 * m[i] + 0.1 * gi;
      if (t <= freeze) v[i] = 0.95 * v[i] + 0.05 * gi * gi;
      const double v_hat = v[i] / (1.0 - std::pow(0.95, std::min(t, freeze)));
      if (decays(i)) p[i] -= lr * 0.1 * p[i];
      p[i] -= lr * (m[i] / (1.0 - std::pow(0.9, t))) / (std::sqrt(v_hat) + 1e-8);
    }
    testing::expect_close(store.flat_values(), p, 1e-5, 1e-5, "step " + std::to_string(t));
  }
  EXPECT_EQ(opt.steps_taken(), 8);
  store[0].grad.data<float>()[0] = NAN;
  const std::vector<double> before = testing::to_f64(store.flat_values());
  const OneBitAdamArgs args{lr, opt.grad_sum_squares(), 1.0f, 1, freeze};
  bool exchanged = false;
  EXPECT_TRUE(onebit_adam_step(opt, args, [&](Tensor&) { exchanged = true; }).skipped);
  EXPECT_FALSE(exchanged);
  EXPECT_EQ(testing::to_f64(store.flat_values()), before);
}

}  // namespace
}  // namespace myriad::optim
