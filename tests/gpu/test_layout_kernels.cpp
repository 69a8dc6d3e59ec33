// The device model's plumbing kernels (kernels/tensor/layout.cu) against host loops on fresh
// random inputs: sums are exact-order f32 (add, broadcast add: bit-exact), column sums within f32
// summation error of a float64 reference, head split/merge are permutations (bit-exact and
// inverse of each other on q/k/v slices of fused rows), bf16 conversions match core/half.h bit
// for bit. Argument errors run everywhere.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gpu_test_support.h"
#include "myriad/core/half.h"
#include "myriad/cuda/kernels.h"
#include "reference.h"

namespace myriad {
namespace {

using testing::DeviceArray;
using testing::expect_error_mentions;
using testing::random_floats;

TEST(LayoutKernels, AddAndBroadcastAddAreExact) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  const std::int64_t rows = 37, width = 129;
  const auto a = random_floats(rows * width, -2, 2, seed, 1), b = random_floats(rows * width, -2, 2, seed, 2);
  const auto row = random_floats(width, -1, 1, seed, 3);
  DeviceArray<float> da(context, a), db(context, b), out(context, rows * width), drow(context, row);
  cuda::add_f32(da.get(), db.get(), out.get(), rows * width, context.stream());
  cuda::add_broadcast_rows_f32(da.get(), drow.get(), rows, width, context.stream());
  const auto sum = out.download(), broadcast = da.download();
  for (std::int64_t i = 0; i < rows * width; ++i) {
    ASSERT_EQ(sum[i], a[i] + b[i]) << i;
    ASSERT_EQ(broadcast[i], a[i] + row[i % width]) << i;
  }
}

TEST(LayoutKernels, ColumnSumsAccumulateMatchFloat64) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  for (auto [rows, cols] : {std::pair<std::int64_t, std::int64_t>{1, 1}, {7, 33}, {4096, 768}, {16, 50304}}) {
    const auto x = random_floats(rows * cols, -1, 1, seed, 4);
    const auto start = random_floats(cols, -1, 1, seed, 5);
    DeviceArray<float> dx(context, x), dout(context, start);
    cuda::column_sums_accumulate_f32(dx.get(), dout.get(), rows, cols, context.stream());
    std::vector<double> expected(cols), got;
    for (std::int64_t c = 0; c < cols; ++c) {
      double s = start[c];
      for (std::int64_t r = 0; r < rows; ++r) s += x[r * cols + c];
      expected[c] = s;
    }
    for (float v : dout.download()) got.push_back(v);
    testing::expect_close(got, expected, 1e-6 * static_cast<double>(rows), 1e-6,
                          "rows " + std::to_string(rows) + " cols " + std::to_string(cols));
    // Run to run identical (fixed summation order).
    DeviceArray<float> again(context, start);
    cuda::column_sums_accumulate_f32(dx.get(), again.get(), rows, cols, context.stream());
    EXPECT_EQ(again.download(), dout.download());
  }
}

TEST(LayoutKernels, SplitAndMergeHeadsArePermutationsOfFusedRows) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  const std::int64_t B = 2, T = 5, H = 3, D = 64, C = H * D, stride = 3 * C;
  const auto qkv = random_floats(B * T * stride, -1, 1, seed, 6);
  DeviceArray<float> dqkv(context, qkv), heads(context, B * H * T * D), merged(context, B * T * stride);
  for (int part = 0; part < 3; ++part) {
    cuda::split_heads_f32(dqkv.get() + part * C, stride, heads.get(), B, T, H, D, context.stream());
    const auto got = heads.download();
    for (std::int64_t b = 0; b < B; ++b)
      for (std::int64_t h = 0; h < H; ++h)
        for (std::int64_t t = 0; t < T; ++t)
          for (std::int64_t d = 0; d < D; ++d)
            ASSERT_EQ(got[((b * H + h) * T + t) * D + d], qkv[(b * T + t) * stride + part * C + h * D + d]);
    cuda::merge_heads_f32(heads.get(), merged.get() + part * C, stride, B, T, H, D, context.stream());
  }
  EXPECT_EQ(merged.download(), qkv);  // every slice written back: the inverse permutation
}

// The 16-bit layout kernels move bits: any pattern (NaN payloads included) arrives unchanged.
TEST(LayoutKernels, SixteenBitSplitAndMergeHeadsMoveEveryBitPattern) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  const std::int64_t B = 2, T = 7, H = 3, D = 64, C = H * D, stride = 2 * C + 8;  // rows with a gap
  std::vector<std::uint16_t> rows(B * T * stride);
  const auto noise = random_floats(rows.size(), 0, 65535, seed, 7);
  for (std::size_t i = 0; i < rows.size(); ++i) rows[i] = static_cast<std::uint16_t>(noise[i]);
  DeviceArray<std::uint16_t> drows(context, rows), heads(context, B * H * T * D), merged(context, rows);
  cuda::split_heads_16(drows.get() + C, stride, heads.get(), B, T, H, D, context.stream());
  const auto got = heads.download();
  for (std::int64_t b = 0; b < B; ++b)
    for (std::int64_t h = 0; h < H; ++h)
      for (std::int64_t t = 0; t < T; ++t)
        for (std::int64_t d = 0; d < D; ++d)
          ASSERT_EQ(got[((b * H + h) * T + t) * D + d], rows[(b * T + t) * stride + C + h * D + d]);
  cuda::merge_heads_16(heads.get(), merged.get(), stride, B, T, H, D, context.stream());  // into part 0
  const auto back = merged.download();
  for (std::int64_t r = 0; r < B * T; ++r)
    for (std::int64_t c = 0; c < stride; ++c)
      ASSERT_EQ(back[r * stride + c], c < C ? rows[r * stride + C + c] : rows[r * stride + c]) << r << ", " << c;
}

TEST(LayoutKernels, Bf16ConversionsRoundToNearestEvenAndWidenExactly) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  const std::int64_t n = 4099;
  const auto x = random_floats(n, -300, 300, seed, 7);
  DeviceArray<float> dx(context, x), back(context, n);
  DeviceArray<std::uint16_t> half(context, n);
  auto* h = reinterpret_cast<__nv_bfloat16*>(half.get());
  cuda::convert_f32_to_bf16(dx.get(), h, n, context.stream());
  cuda::convert_bf16_to_f32(h, back.get(), n, context.stream());
  const auto bits = half.download();
  const auto widened = back.download();
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(bits[i], float_to_bf16(x[i])) << i;  // core/half.h: round to nearest even
    ASSERT_EQ(widened[i], bf16_to_float(bits[i])) << i;
  }
}

// f16: nearest even with subnormals; beyond 65504 (rounding past 65520) the value becomes inf,
// which fp16 loss scaling relies on to detect overflow.
TEST(LayoutKernels, F16ConversionsRoundToNearestEvenOverflowToInfAndWidenExactly) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  const std::int64_t n = 4099;
  auto x = random_floats(n, -300, 300, seed, 8);
  x[0] = 70000.0f;   // inf
  x[1] = -65519.0f;  // rounds to -65504
  x[2] = 3e-7f;      // subnormal
  x[3] = 1e-9f;      // rounds to zero
  DeviceArray<float> dx(context, x), back(context, n);
  DeviceArray<std::uint16_t> half(context, n);
  auto* h = reinterpret_cast<__half*>(half.get());
  cuda::convert_f32_to_f16(dx.get(), h, n, context.stream());
  cuda::convert_f16_to_f32(h, back.get(), n, context.stream());
  const auto bits = half.download();
  const auto widened = back.download();
  EXPECT_TRUE(std::isinf(widened[0]));
  EXPECT_EQ(widened[1], -65504.0f);
  for (std::int64_t i = 0; i < n; ++i) {
    ASSERT_EQ(bits[i], float_to_f16(x[i])) << i;  // core/half.h
    ASSERT_EQ(widened[i], f16_to_float(bits[i])) << i;
  }
}

TEST(LayoutKernels, ArgumentErrorsNameTheLauncher) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): fake device address, never dereferenced: argument checks fail first
  float* fake = reinterpret_cast<float*>(std::uintptr_t{256});
  expect_error_mentions([&] { cuda::add_f32(fake, fake, fake, -1, nullptr); }, {"add_f32", "n must be >= 0"});
  expect_error_mentions([&] { cuda::split_heads_f32(fake, 10, fake + 4096, 1, 2, 3, 4, nullptr); },
                        {"split_heads_f32", "row stride 10", "12"});
  expect_error_mentions([&] { cuda::column_sums_accumulate_f32(fake, fake, 4, 4, nullptr); },
                        {"column_sums_accumulate_f32", "overlaps"});
  expect_error_mentions([&] { cuda::add_broadcast_rows_f32(nullptr, fake, 2, 2, nullptr); },
                        {"add_broadcast_rows_f32", "x is null"});
}

}  // namespace
}  // namespace myriad
