// The fused cross-entropy kernels (kernels/loss/cross_entropy.cu) against the CPU op
// (ops/cross_entropy.h) on fresh random logits: losses and lse (rtol 2e-6: both reduce in f32,
// in different orders) and the gradient written over the logits in place (atol 1e-7: softmax
// values of at most 1, scaled by grad_losses), with ignored rows (zero loss and gradient), a
// vocabulary that is not a multiple of the block size, large logits (the max subtraction), and
// a bad target reported through bad_row. Argument errors name the launcher and argument.
#include <gtest/gtest.h>

#include <climits>
#include <vector>

#include "gpu_test_support.h"
#include "myriad/core/philox.h"
#include "myriad/cuda/kernels.h"
#include "myriad/ops/cross_entropy.h"
#include "reference.h"

namespace myriad {
namespace {

using testing::as_f64;
using testing::DeviceArray;
using testing::expect_error_mentions;

TEST(CrossEntropyKernel, MatchesTheCpuOpForwardAndInPlaceBackward) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  constexpr std::int32_t kIgnore = -100;
  struct Shape {
    std::int64_t rows, vocab;
    float spread;
  };
  for (const Shape& shape : {Shape{1, 1, 1}, Shape{7, 300, 4}, Shape{64, 50257, 8}, Shape{33, 1000, 400}}) {
    const std::int64_t n = shape.rows, vocab = shape.vocab;
    Tensor logits = Tensor::empty({n, vocab});
    fill_uniform(logits, -shape.spread, shape.spread, seed, static_cast<std::uint64_t>(vocab));
    Tensor targets = Tensor::empty({n}, DType::i32), grad_losses = Tensor::empty({n});
    fill_uniform(grad_losses, 0.1f, 1.0f, seed, 7);
    for (std::int64_t r = 0; r < n; ++r) {
      targets.data<std::int32_t>()[r] = r % 5 == 3 ? kIgnore : static_cast<std::int32_t>((r * 7919) % vocab);
    }
    Tensor losses = Tensor::empty({n}), lse = Tensor::empty({n}), grad = Tensor::empty({n, vocab});
    cross_entropy_forward(CrossEntropyArgs{.ignore_index = kIgnore}, logits, targets, losses, lse);

    const std::vector<float> host_logits(logits.data<float>(), logits.data<float>() + n * vocab);
    DeviceArray<float> dlogits(context, host_logits), dlosses(context, n), dlse(context, n);
    DeviceArray<std::int32_t> dtargets(
        context, std::vector<std::int32_t>(targets.data<std::int32_t>(), targets.data<std::int32_t>() + n));
    DeviceArray<float> dgrad_losses(context,
                                    std::vector<float>(grad_losses.data<float>(), grad_losses.data<float>() + n));
    DeviceArray<long long> bad(context, std::vector<long long>{LLONG_MAX});
    cuda::cross_entropy_forward_f32(dlogits.get(), dtargets.get(), dlosses.get(), dlse.get(), bad.get(), n, vocab,
                                    vocab, kIgnore, context.stream());
    cuda::cross_entropy_backward_f32(dlogits.get(), dtargets.get(), dlse.get(), dgrad_losses.get(), dlogits.get(), n,
                                     vocab, vocab, kIgnore, context.stream());
    // The backward's reference reads the kernel's own lse: at |logits| ~ 400 an f32 lse is only
    // good to one ulp of 400 (3e-5), and exp(x - lse) carries that difference into every
    // probability; the forward is compared separately above its own rounding.
    const std::vector<float> device_lse = dlse.download();
    Tensor lse_of_kernel = Tensor::empty({n});
    std::copy(device_lse.begin(), device_lse.end(), lse_of_kernel.data<float>());
    cross_entropy_backward(CrossEntropyArgs{.ignore_index = kIgnore}, logits, targets, lse_of_kernel, grad_losses,
                           grad);
    const std::string what = "rows " + std::to_string(n) + ", vocab " + std::to_string(vocab);
    EXPECT_EQ(bad.download()[0], LLONG_MAX) << what;
    testing::expect_close(as_f64(dlosses.download()), testing::to_f64(losses), 1e-6, 2e-6, "losses " + what);
    testing::expect_close(as_f64(dlse.download()), testing::to_f64(lse), 1e-6, 2e-6, "lse " + what);
    testing::expect_close(as_f64(dlogits.download()), testing::to_f64(grad), 1e-7, 1e-5, "grad (in place) " + what);
  }
}

// The vocabulary-shard backward: each of three column shards of the rows, given the full rows'
// lse, writes exactly its columns of the full backward (targets in other shards, ignored rows).
TEST(CrossEntropyKernel, ShardBackwardEqualsItsColumnsOfTheFullBackward) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  constexpr std::int32_t kIgnore = -100;
  const std::int64_t n = 37, vocab = 1000;
  Tensor logits = Tensor::empty({n, vocab});
  fill_uniform(logits, -6.0f, 6.0f, seed, 1);
  Tensor targets = Tensor::empty({n}, DType::i32), grad_losses = Tensor::empty({n});
  fill_uniform(grad_losses, 0.1f, 1.0f, seed, 2);
  for (std::int64_t r = 0; r < n; ++r) {
    targets.data<std::int32_t>()[r] = r % 6 == 5 ? kIgnore : static_cast<std::int32_t>((r * 7919) % vocab);
  }
  Tensor losses = Tensor::empty({n}), lse = Tensor::empty({n}), grad = Tensor::empty({n, vocab});
  cross_entropy_forward(CrossEntropyArgs{.ignore_index = kIgnore}, logits, targets, losses, lse);
  cross_entropy_backward(CrossEntropyArgs{.ignore_index = kIgnore}, logits, targets, lse, grad_losses, grad);
  const std::int64_t bounds[] = {0, 300, 700, vocab};
  DeviceArray<std::int32_t> dtargets(
      context, std::vector<std::int32_t>(targets.data<std::int32_t>(), targets.data<std::int32_t>() + n));
  DeviceArray<float> dlse(context, std::vector<float>(lse.data<float>(), lse.data<float>() + n));
  DeviceArray<float> dgrad_losses(context,
                                  std::vector<float>(grad_losses.data<float>(), grad_losses.data<float>() + n));
  for (int shard = 0; shard < 3; ++shard) {
    const std::int64_t start = bounds[shard], width = bounds[shard + 1] - start;
    std::vector<float> columns;
    std::vector<double> want;
    for (std::int64_t r = 0; r < n; ++r) {
      for (std::int64_t v = start; v < start + width; ++v) {
        columns.push_back(logits.data<float>()[r * vocab + v]);
        want.push_back(grad.data<float>()[r * vocab + v]);
      }
    }
    DeviceArray<float> dcolumns(context, columns), dgrad(context, n * width);
    cuda::cross_entropy_backward_shard_f32(dcolumns.get(), dtargets.get(), dlse.get(), dgrad_losses.get(), dgrad.get(),
                                           n, width, width, start, kIgnore, context.stream());
    testing::expect_close(as_f64(dgrad.download()), want, 1e-7, 1e-5, "shard " + std::to_string(shard));
  }
}

// Rows padded to an aligned width (the model's padded vocabulary): the sums stop at the real
// columns, the padding's gradient is written 0 (over garbage), the same as the CPU op with classes.
TEST(CrossEntropyKernel, PaddedRowsLeaveThePaddingOutAndZeroItsGradient) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  constexpr std::int32_t kIgnore = -100;
  const std::int64_t n = 29, vocab = 1000, width = 1024;
  Tensor logits = Tensor::empty({n, width});
  fill_uniform(logits, -6.0f, 6.0f, seed, 1);
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t v = vocab; v < width; ++v) logits.data<float>()[r * width + v] = 1e30f;  // never summed
  }
  Tensor targets = Tensor::empty({n}, DType::i32), grad_losses = Tensor::empty({n});
  fill_uniform(grad_losses, 0.1f, 1.0f, seed, 2);
  for (std::int64_t r = 0; r < n; ++r) {
    targets.data<std::int32_t>()[r] = r % 7 == 4 ? kIgnore : static_cast<std::int32_t>((r * 7919) % vocab);
  }
  const CrossEntropyArgs args{.ignore_index = kIgnore, .classes = vocab};
  Tensor losses = Tensor::empty({n}), lse = Tensor::empty({n}), grad = Tensor::empty({n, width});
  cross_entropy_forward(args, logits, targets, losses, lse);
  cross_entropy_backward(args, logits, targets, lse, grad_losses, grad);
  DeviceArray<float> dlogits(context, std::vector<float>(logits.data<float>(), logits.data<float>() + n * width));
  DeviceArray<float> dlosses(context, n), dlse(context, n);
  DeviceArray<std::int32_t> dtargets(
      context, std::vector<std::int32_t>(targets.data<std::int32_t>(), targets.data<std::int32_t>() + n));
  DeviceArray<float> dgrad_losses(context,
                                  std::vector<float>(grad_losses.data<float>(), grad_losses.data<float>() + n));
  DeviceArray<long long> bad(context, std::vector<long long>{LLONG_MAX});
  cuda::cross_entropy_forward_f32(dlogits.get(), dtargets.get(), dlosses.get(), dlse.get(), bad.get(), n, vocab, width,
                                  kIgnore, context.stream());
  cuda::cross_entropy_backward_f32(dlogits.get(), dtargets.get(), dlse.get(), dgrad_losses.get(), dlogits.get(), n,
                                   vocab, width, kIgnore, context.stream());
  EXPECT_EQ(bad.download()[0], LLONG_MAX);
  testing::expect_close(as_f64(dlosses.download()), testing::to_f64(losses), 1e-6, 2e-6, "losses");
  const std::vector<float> device_grad = dlogits.download();
  for (std::int64_t r = 0; r < n; ++r) {
    for (std::int64_t v = vocab; v < width; ++v) ASSERT_EQ(device_grad[r * width + v], 0.0f) << r << ", " << v;
  }
  testing::expect_close(as_f64(device_grad), testing::to_f64(grad), 1e-7, 1e-5, "grad (in place)");
}

TEST(CrossEntropyKernel, ABadTargetIsReportedByRow) {
  MYRIAD_REQUIRE_GPU();
  cuda::DeviceContext context(0);
  DeviceArray<float> logits(context, std::vector<float>(4 * 10, 0.5f)), losses(context, 4), lse(context, 4);
  DeviceArray<std::int32_t> targets(context, std::vector<std::int32_t>{1, 12, -3, 2});
  DeviceArray<long long> bad(context, std::vector<long long>{LLONG_MAX});
  cuda::cross_entropy_forward_f32(logits.get(), targets.get(), losses.get(), lse.get(), bad.get(), 4, 10, 10, -100,
                                  context.stream());
  EXPECT_EQ(bad.download()[0], 1) << "the lowest bad row";
}

TEST(CrossEntropyKernel, BadArgumentsNameTheLauncherAndArgument) {
  // Addresses the launchers only check (never dereferenced): the argument errors come first.
  float* fake = reinterpret_cast<float*>(std::uintptr_t{256});                // NOLINT(performance-no-int-to-ptr)
  std::int32_t* ids = reinterpret_cast<std::int32_t*>(std::uintptr_t{1024});  // NOLINT(performance-no-int-to-ptr)
  long long* bad = reinterpret_cast<long long*>(std::uintptr_t{2048});        // NOLINT(performance-no-int-to-ptr)
  expect_error_mentions(
      [&] { cuda::cross_entropy_forward_f32(fake, ids, fake + 64, fake + 128, bad, 4, 0, 0, -100, nullptr); },
      {"cross_entropy_forward_f32", "vocab must be >= 1"});
  expect_error_mentions(
      [&] { cuda::cross_entropy_forward_f32(nullptr, ids, fake, fake + 64, bad, 4, 8, 8, -100, nullptr); },
      {"cross_entropy_forward_f32", "logits is null"});
  expect_error_mentions(
      [&] { cuda::cross_entropy_forward_f32(fake, ids, fake, fake + 1, bad, 4, 8, 8, -100, nullptr); },
      {"cross_entropy_forward_f32", "overlaps"});
  expect_error_mentions(
      [&] { cuda::cross_entropy_backward_f32(fake, ids, fake, fake, fake + 1, 4, 8, 8, -100, nullptr); },
      {"cross_entropy_backward_f32", "overlaps"});
}

}  // namespace
}  // namespace myriad
