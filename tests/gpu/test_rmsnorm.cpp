// RMSNorm kernels (the uncentred path of kernels/norms/layernorm.cu) against float64 on fresh
// random inputs: out and rstd forward; backward of L = sum(out * grad_out) against the analytic
// float64 gradient (itself the CPU op's formula, checked against finite differences in
// tests/ops) — grad_x written over NaN, grad_weight accumulated onto random values — for one
// row, odd C, C > 1024 and N large enough for several row groups of the weight reduction.
// Inputs are uniform in [0.5, 1.5) with random signs, so rstd stays near 1 and f32 errors are
// not amplified: out, rstd rtol 4e-6; grad_x atol 4e-6; grad_weight atol 2e-6 sqrt(N) + rtol 4e-6
// (a sum of N terms of O(1)), as for LayerNorm.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gpu_test_support.h"
#include "myriad/core/philox.h"
#include "myriad/cuda/kernels.h"
#include "reference.h"

namespace myriad {
namespace {

using testing::as_f64;
using testing::DeviceArray;
using testing::expect_error_mentions;

constexpr float kRmsnormEps = 1e-5f;

TEST(RmsnormKernel, ForwardAndBackwardMatchFloat64) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  for (auto [rows, channels] : {std::pair<std::int64_t, std::int64_t>{1, 7}, {5, 33}, {17, 1031}, {3000, 96}}) {
    std::vector<float> x = testing::random_floats(rows * channels, 0.5f, 1.5f, seed, 1);
    const std::vector<float> signs = testing::random_floats(rows * channels, -1, 1, seed, 2);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] *= signs[i] < 0 ? -1.0f : 1.0f;
    const std::vector<float> w = testing::random_floats(channels, 0.5f, 1.5f, seed, 3);
    const std::vector<float> go = testing::random_floats(rows * channels, -1, 1, seed, 4);
    const std::vector<float> gw0 = testing::random_floats(channels, -1, 1, seed, 5);
    std::vector<double> out(x.size()), rstd(rows), gx(x.size()), gw(gw0.begin(), gw0.end());
    for (std::int64_t n = 0; n < rows; ++n) {
      double squares = 0.0;
      for (std::int64_t c = 0; c < channels; ++c)
        squares += static_cast<double>(x[n * channels + c]) * x[n * channels + c];
      const double r = 1.0 / std::sqrt(squares / static_cast<double>(channels) + kRmsnormEps);
      rstd[n] = r;
      double mean_gxhat = 0.0;
      for (std::int64_t c = 0; c < channels; ++c) {
        const std::int64_t i = n * channels + c;
        out[i] = x[i] * r * w[c];
        mean_gxhat += static_cast<double>(go[i]) * w[c] * (x[i] * r);
        gw[c] += static_cast<double>(go[i]) * (x[i] * r);
      }
      mean_gxhat /= static_cast<double>(channels);
      for (std::int64_t c = 0; c < channels; ++c) {
        const std::int64_t i = n * channels + c;
        gx[i] = r * (static_cast<double>(go[i]) * w[c] - (x[i] * r) * mean_gxhat);
      }
    }
    DeviceArray<float> dx(context, x), dw(context, w), dgo(context, go), dgw(context, gw0);
    DeviceArray<float> dout(context, rows * channels), drstd(context, rows), dgx(context, rows * channels);
    const std::int64_t scratch_n = std::max<std::int64_t>(1, cuda::layernorm_backward_scratch_floats(rows, channels));
    DeviceArray<float> scratch(context, scratch_n);
    cuda::rmsnorm_forward_f32(dx.get(), dw.get(), dout.get(), drstd.get(), rows, channels, kRmsnormEps,
                              context.stream());
    cuda::rmsnorm_backward_f32(dgo.get(), dx.get(), dw.get(), drstd.get(), dgx.get(), dgw.get(), scratch.get(),
                               scratch_n, rows, channels, context.stream());
    const std::string what = "(N, C) = (" + std::to_string(rows) + ", " + std::to_string(channels) + ")";
    testing::expect_close(as_f64(dout.download()), out, 4e-6, 4e-6, "rmsnorm out " + what);
    testing::expect_close(as_f64(drstd.download()), rstd, 0.0, 4e-6, "rmsnorm rstd " + what);
    testing::expect_close(as_f64(dgx.download()), gx, 4e-6, 4e-6, "rmsnorm grad_x " + what);
    testing::expect_close(as_f64(dgw.download()), gw, 2e-6 * std::sqrt(static_cast<double>(rows)), 4e-6,
                          "rmsnorm grad_weight " + what);
  }
}

TEST(RmsnormKernel, BadArgumentsNameTheLauncherAndArgument) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): fake device address, never dereferenced: argument checks fail first
  float* fake = reinterpret_cast<float*>(std::uintptr_t{256});
  expect_error_mentions([&] { cuda::rmsnorm_forward_f32(fake, fake, fake + 1024, fake, 4, 8, -1.0f, nullptr); },
                        {"rmsnorm_forward_f32", "eps must be >= 0"});
  expect_error_mentions([&] { cuda::rmsnorm_forward_f32(fake, fake, fake + 4, nullptr, 4, 8, 1e-5f, nullptr); },
                        {"rmsnorm_forward_f32", "out", "overlaps"});
  expect_error_mentions(
      [&] {
        cuda::rmsnorm_backward_f32(fake, fake + 64, fake, nullptr, fake + 1024, nullptr, nullptr, 0, 4, 8, nullptr);
      },
      {"rmsnorm_backward_f32", "rstd is null"});
}

}  // namespace
}  // namespace myriad
