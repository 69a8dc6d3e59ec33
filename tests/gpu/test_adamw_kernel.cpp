// The AdamW and gradient-norm kernels (kernels/optim/adamw.cu) against the CPU ops on fresh
// random inputs: several steps of adamw_update_f32 follow ops/adamw.h's adamw_update (the same
// f32 formula with host-folded bias corrections; the GPU fuses multiply-adds, so values agree to
// a few ulps: rtol 2e-6 on parameters after 3 steps), including weight decay and a grad scale;
// grad_norm_squared_f32 equals the float64 sum of squares to 1e-12 relative (both sum in
// float64, in different orders) and is bit-identical between two calls. Argument errors name
// the launcher and the argument without touching the GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gpu_test_support.h"
#include "myriad/core/philox.h"
#include "myriad/cuda/kernels.h"
#include "myriad/ops/adamw.h"
#include "reference.h"

namespace myriad {
namespace {

using testing::as_f64;
using testing::DeviceArray;
using testing::expect_error_mentions;

TEST(AdamWKernel, MatchesTheCpuUpdateOverSeveralSteps) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  for (std::int64_t n : {1, 1000, 65537, 3000001}) {
    std::vector<float> param = testing::random_floats(n, -1, 1, seed, 1), m(n, 0.0f), v(n, 0.0f);
    Tensor cpu_param = Tensor::empty({n}), cpu_m = Tensor::zeros({n}), cpu_v = Tensor::zeros({n});
    std::copy(param.begin(), param.end(), cpu_param.data<float>());
    DeviceArray<float> dparam(context, param), dm(context, m), dv(context, v), dgrad(context, n);
    for (std::int64_t step = 1; step <= 3; ++step) {
      const std::vector<float> grad =
          testing::random_floats(n, -0.01f, 0.01f, seed, 10 + static_cast<std::uint64_t>(step));
      dgrad.upload(grad);
      Tensor cpu_grad = Tensor::empty({n});
      std::copy(grad.begin(), grad.end(), cpu_grad.data<float>());
      const cuda::AdamWStep args{.lr = 1e-3f,
                                 .beta1 = 0.9f,
                                 .beta2 = 0.95f,
                                 .eps = 1e-8f,
                                 .weight_decay = 0.1f,
                                 .grad_scale = 0.5f,
                                 .step = step};
      cuda::adamw_update_f32(dparam.get(), dgrad.get(), dm.get(), dv.get(), n, args, context.stream());
      cpu::adamw_update(AdamWArgs{.lr = 1e-3f,
                                  .beta1 = 0.9f,
                                  .beta2 = 0.95f,
                                  .eps = 1e-8f,
                                  .weight_decay = 0.1f,
                                  .step = step,
                                  .grad_scale = 0.5f},
                        cpu_param, cpu_grad, cpu_m, cpu_v);
    }
    testing::expect_close(as_f64(dparam.download()), testing::to_f64(cpu_param), 1e-7, 2e-6,
                          "adamw param n=" + std::to_string(n));
    // m sums terms of up to (1 - beta1) x grad_scale x 0.01 = 5e-4 that may cancel: a few ulps of a
    // term (2^-24 x 5e-4 = 3e-11 each) is the absolute margin, not the result's ulp (seen on the
    // H200, 2026-12-04: 1.04e-10 apart at m = 1.6e-6).
    testing::expect_close(as_f64(dm.download()), testing::to_f64(cpu_m), 3e-10, 2e-6, "adamw m");
    testing::expect_close(as_f64(dv.download()), testing::to_f64(cpu_v), 1e-14, 2e-6, "adamw v");
  }
}

TEST(AdamWKernel, GradNormIsTheFloat64SumOfSquaresAndDeterministic) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  for (std::int64_t n : {0, 1, 16383, 16385, 5000000}) {
    const std::vector<float> grad = testing::random_floats(std::max<std::int64_t>(n, 1), -3, 3, seed, 2);
    std::vector<float> used(grad.begin(), grad.begin() + n);
    double expected = 0.0;
    for (float g : used) expected += static_cast<double>(g) * g;
    DeviceArray<float> dgrad(context, std::max<std::int64_t>(n, 1));
    if (n > 0) dgrad.upload(grad);
    const std::int64_t scratch_n = std::max<std::int64_t>(cuda::grad_norm_scratch_doubles(n), 1);
    DeviceArray<double> scratch(context, scratch_n), out(context, 1);
    cuda::grad_norm_squared_f32(dgrad.get(), n, scratch.get(), scratch_n, out.get(), context.stream());
    const double first = out.download()[0];
    cuda::grad_norm_squared_f32(dgrad.get(), n, scratch.get(), scratch_n, out.get(), context.stream());
    EXPECT_EQ(out.download()[0], first) << "n=" << n;
    EXPECT_NEAR(first, expected, 1e-12 * expected + 1e-300) << "n=" << n;
  }
}

TEST(AdamWKernel, BadArgumentsNameTheLauncherAndArgument) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): fake device address, never dereferenced: argument checks fail first
  float* fake = reinterpret_cast<float*>(std::uintptr_t{256});
  expect_error_mentions([&] { cuda::adamw_update_f32(fake, fake, fake, fake, 4, cuda::AdamWStep{.step = 0}, nullptr); },
                        {"adamw_update_f32", "step must be >= 1"});
  expect_error_mentions(
      [&] { cuda::adamw_update_f32(nullptr, fake, fake, fake, 4, cuda::AdamWStep{.step = 1}, nullptr); },
      {"adamw_update_f32", "param is null"});
  expect_error_mentions(
      [&] { cuda::adamw_update_f32(fake, fake, fake + 64, fake + 128, 4, cuda::AdamWStep{.step = 1}, nullptr); },
      {"adamw_update_f32", "overlaps"});
  // NOLINTNEXTLINE(performance-no-int-to-ptr): fake device address, never dereferenced: argument checks fail first
  double* d = reinterpret_cast<double*>(std::uintptr_t{512});
  expect_error_mentions([&] { cuda::grad_norm_squared_f32(fake, 100000, d, 1, d, nullptr); },
                        {"grad_norm_squared_f32", "scratch holds 1 doubles"});
}

}  // namespace
}  // namespace myriad
