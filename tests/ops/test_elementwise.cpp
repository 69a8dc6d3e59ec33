// Elementwise plumbing against float64: scaled sums (forward, in place, b skipped) with
// finite-difference gradients, written and accumulated; copies converting f32 <-> bf16 / f16 with
// round to nearest even and reading strided views; zero; argument errors naming op and tensor.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>

#include "myriad/core/half.h"
#include "myriad/ops/elementwise.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using namespace testing;

TEST(Elementwise, ScaledSumMatchesFloat64InPlaceAndAsAScale) {
  const std::uint64_t seed = fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const Tensor a = random_tensor({3, 5, 7}, seed, 0), b = random_tensor({3, 5, 7}, seed, 1);
  const AddArgs args{.alpha = 0.75f, .beta = -2.5f};
  const std::vector<double> va = to_f64(a), vb = to_f64(b);
  std::vector<double> sum(va.size()), scaled(va.size());
  for (std::size_t i = 0; i < va.size(); ++i) {
    sum[i] = 0.75 * va[i] - 2.5 * vb[i];
    scaled[i] = 0.75 * va[i];
  }
  Tensor out = Tensor::empty({3, 5, 7});
  add_forward(args, a, b, out);
  expect_close(out, sum, 1e-6, 1e-6, "alpha a + beta b");
  Tensor in_place = b.clone();
  add_forward(args, a, in_place, in_place);
  expect_close(in_place, sum, 1e-6, 1e-6, "in place (out = b)");
  add_forward(args, a, Tensor(), out);
  expect_close(out, scaled, 1e-7, 1e-7, "b undefined: a scale");
}

TEST(Elementwise, ScaledSumGradientsMatchFiniteDifferencesWrittenAndAccumulated) {
  const std::uint64_t seed = fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const AddArgs args{.alpha = 1.5f, .beta = 0.25f};
  const Tensor a = random_tensor({4, 6}, seed, 0), b = random_tensor({4, 6}, seed, 1);
  const Tensor g = random_tensor({4, 6}, seed, 2);
  const std::vector<double> vg = to_f64(g), va = to_f64(a), vb = to_f64(b);
  // L = sum(g * out) as a function of a (b fixed) and of b (a fixed), in float64.
  const auto loss_of_a = [&](const std::vector<double>& x) {
    double s = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) s += vg[i] * (1.5 * x[i] + 0.25 * vb[i]);
    return s;
  };
  const auto loss_of_b = [&](const std::vector<double>& x) {
    double s = 0.0;
    for (std::size_t i = 0; i < x.size(); ++i) s += vg[i] * (1.5 * va[i] + 0.25 * x[i]);
    return s;
  };
  const std::vector<double> da = numerical_gradient(loss_of_a, va), db = numerical_gradient(loss_of_b, vb);
  Tensor grad_a = Tensor::empty({4, 6}), grad_b = Tensor::empty({4, 6});
  add_backward(args, g, grad_a, grad_b);
  expect_close(grad_a, da, 1e-6, 1e-6, "grad_a");
  expect_close(grad_b, db, 1e-6, 1e-6, "grad_b");
  // Accumulated into what is there; and in place on grad_out.
  const Tensor start = random_tensor({4, 6}, seed, 3);
  std::vector<double> accumulated = to_f64(start);
  for (std::size_t i = 0; i < accumulated.size(); ++i) accumulated[i] += db[i];
  Tensor acc = start.clone(), none;
  add_backward(AddArgs{.alpha = 1.5f, .beta = 0.25f, .accumulate_grads = true}, g, none, acc);
  expect_close(acc, accumulated, 1e-6, 1e-6, "grad_b +=");
  Tensor shared = g.clone(), other = Tensor::empty({4, 6});
  add_backward(args, shared, other, shared);  // grad_b is grad_out: grad_a still reads it first
  expect_close(other, da, 1e-6, 1e-6, "grad_a beside an in-place grad_b");
  expect_close(shared, db, 1e-6, 1e-6, "grad_b in place");
}

TEST(Elementwise, CopyConvertsWithRoundToNearestEvenAndReadsViews) {
  const std::uint64_t seed = fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const Tensor x = random_tensor({6, 9}, seed, 0, -300.0f, 300.0f);
  for (DType half : {DType::bf16, DType::f16}) {
    Tensor h = Tensor::empty({6, 9}, half), back = Tensor::empty({6, 9});
    copy(x, h);
    copy(h, back);
    std::vector<double> expected;
    for (double v : to_f64(x)) {
      const float f = static_cast<float>(v);
      expected.push_back(half == DType::bf16 ? bf16_to_float(float_to_bf16(f)) : f16_to_float(float_to_f16(f)));
    }
    expect_close(back, expected, 0.0, 0.0, std::string(dtype_name(half)));
  }
  const Tensor view = x.permute({1, 0});
  Tensor gathered = Tensor::empty({9, 6});
  copy(view, gathered);
  expect_close(gathered, to_f64(view), 0.0, 0.0, "strided source");
  Tensor z = x.clone();
  zero(z);
  for (double v : to_f64(z)) EXPECT_EQ(v, 0.0);
  fill(z, -2.5f);
  for (double v : to_f64(z)) EXPECT_EQ(v, -2.5);
}

TEST(Elementwise, ZeroOfALargeSliceClearsEveryChunkAndNothingAround) {
  // Over 4 MiB the memset is split in 1 MiB pieces over the threads: a slice whose size is no multiple
  // of the piece, at an offset, must come out all zero with its neighbours untouched.
  const std::int64_t rows = 2 * 1310723;  // two halves of 5 MiB + 12 bytes of f32 each
  Tensor buffer = Tensor::empty({rows});
  buffer.fill(1.5f);
  Tensor second = buffer.slice(0, rows / 2 - 1, rows - 1);
  zero(second);
  const float* p = buffer.data<float>();
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < rows; ++i) {
    const bool inside = i >= rows / 2 - 1 && i < rows - 1;
    wrong += p[i] != (inside ? 0.0f : 1.5f);
  }
  EXPECT_EQ(wrong, 0);
}

TEST(Elementwise, ZeroOfASliceLargerThanHalfTheLastLevelCacheStreamsEveryByte) {
  // Past half the last-level cache's size zero() writes with non-temporal stores, 16 bytes at a
  // time from the first 16-byte boundary: a slice starting 4 bytes past one and ending mid-vector
  // must still come out all zero, with its neighbours untouched.
  const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  const std::int64_t threshold = (llc > 0 ? llc : std::int64_t{32} << 20) / 2;  // bytes
  if (threshold > (std::int64_t{1} << 30)) GTEST_SKIP() << "half a last-level cache is " << threshold << " bytes";
  const std::int64_t inside = threshold / 4 + 3 * 262144 + 7;  // floats: past the threshold, odd length
  Tensor buffer = Tensor::empty({inside + 10});
  buffer.fill(1.5f);
  Tensor middle = buffer.slice(0, 1, 1 + inside);
  zero(middle);
  const float* p = buffer.data<float>();
  std::int64_t wrong = 0;
  for (std::int64_t i = 0; i < inside + 10; ++i) wrong += p[i] != (i >= 1 && i < 1 + inside ? 0.0f : 1.5f);
  EXPECT_EQ(wrong, 0);
}

TEST(Elementwise, ArgumentErrorsNameOpAndTensor) {
  Tensor a = Tensor::zeros({2, 3}), wrong = Tensor::zeros({3, 2}), out = Tensor::zeros({2, 3});
  expect_error_naming([&] { add_forward(AddArgs{}, a, wrong, out); }, {"add_forward", "'b'", "[3, 2]"});
  Tensor ints = Tensor::zeros({2, 3}, DType::i32);
  expect_error_naming([&] { copy(a, ints); }, {"copy", "f32 -> i32"});
  // The CPU writes a strided destination (a device backend requires it contiguous).
  Tensor source = testing::random_tensor({2, 3}, 5, 0);
  Tensor strided_dst = Tensor::zeros({3, 2}).permute({1, 0});
  copy(source, strided_dst);
  EXPECT_EQ(to_f64(strided_dst), to_f64(source));
  Tensor g = Tensor::zeros({2, 3});
  expect_error_naming([&] { add_backward(AddArgs{}, g, out, out); }, {"add_backward", "same buffer"});
}

// round_to_format: every element becomes the float nearest to it in the format (ties to even),
// checked against a float64 search over the format's neighbours; f32 leaves t as it is.
TEST(Elementwise, RoundToFormatPicksTheNearestRepresentableValue) {
  std::uint64_t seed = fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Tensor x = random_tensor({257}, seed, 0);
  for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] *= 300.0f;
  const Tensor before = x.clone();
  round_to_format(x, DType::f32);
  EXPECT_EQ(to_f64(x), to_f64(before));
  for (DType format : {DType::bf16, DType::f16}) {
    Tensor t = before.clone();
    round_to_format(t, format);
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      const float v = before.data<float>()[i], r = t.data<float>()[i];
      const float back = format == DType::bf16 ? bf16_to_float(float_to_bf16(r)) : f16_to_float(float_to_f16(r));
      EXPECT_EQ(back, r) << "element " << i << " is not representable in " << dtype_name(format);
      const double step = format == DType::bf16 ? std::ldexp(1.0, std::ilogb(v) - 7)
                                                : std::ldexp(1.0, std::max(std::ilogb(v), -14) - 10);
      EXPECT_LE(std::abs(static_cast<double>(r) - v), step / 2 * (1 + 1e-12)) << "element " << i;
    }
  }
}

}  // namespace
}  // namespace myriad
