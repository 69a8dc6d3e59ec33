// FP8 ops against references: fp8_quantize writes fp8(x * scale) element by element (the
// rounding itself is checked against float64 in tests/core/test_fp8.cpp), its transposed copy, the
// running amax and NaN's propagation; fp8_gemm equals a float64 GEMM of the decoded operands times
// their dequantisation factors, overwriting and accumulating, for each allowed format pair; arguments it refuses are
// named.
#include <gtest/gtest.h>

#include <cmath>

#include "myriad/core/fp8.h"
#include "myriad/ops/fp8.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using namespace testing;

// A one-element f32 tensor: the ops' scale and dequantisation operands.
Tensor scalar(float value) { return Tensor::full({1}, value); }

Tensor quantized(const Tensor& x, DType format, float scale) {
  Tensor out = Tensor::empty(x.shape(), format), none;
  fp8_quantize(x, scalar(scale), out, none, none);
  return out;
}

TEST(Fp8Quantize, WritesTheScaledValuesTheirTransposeAndTheRunningAmax) {
  const std::uint64_t seed = fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t N = 37, C = 21;
  for (DType format : {DType::f8e4m3, DType::f8e5m2}) {
    SCOPED_TRACE(std::string(dtype_name(format)));
    const Fp8Format& f = fp8_format(format);
    Tensor x = random_tensor({N, C}, seed, 0, -3.0f, 3.0f);
    x.data<float>()[5] = 1e6f;  // saturates at the largest finite value
    const float scale = 37.5f;
    Tensor out = Tensor::empty({N, C}, format), out_t = Tensor::empty({C, N}, format);
    Tensor amax = Tensor::full({1}, 2.0f);  // below max |x|: replaced
    fp8_quantize(x, scalar(scale), out, out_t, amax);
    const std::vector<double> xs = to_f64(x), q = to_f64(out), qt = to_f64(out_t);
    double largest = 0.0;
    for (std::int64_t r = 0; r < N; ++r) {
      for (std::int64_t c = 0; c < C; ++c) {
        const float v = static_cast<float>(xs[r * C + c]);
        const double expected = round_to_fp8(v * scale, f);
        ASSERT_EQ(q[r * C + c], expected) << "x[" << r << ", " << c << "] = " << v;
        ASSERT_EQ(qt[c * N + r], expected) << "transposed [" << c << ", " << r << "]";
        largest = std::max(largest, std::fabs(xs[r * C + c]));
      }
    }
    EXPECT_EQ(q[5], f.max_finite);
    EXPECT_EQ(static_cast<double>(amax.data<float>()[0]), largest);
    Tensor big = Tensor::full({1}, 5e6f), none;  // above max |x|: kept
    fp8_quantize(x, scalar(scale), out, none, big);
    EXPECT_EQ(big.data<float>()[0], 5e6f);
    x.data<float>()[7] = NAN;
    fp8_quantize(x, scalar(scale), out, none, amax);
    EXPECT_TRUE(std::isnan(amax.data<float>()[0]));
    EXPECT_TRUE(std::isnan(to_f64(out)[7]));
  }
}

TEST(Fp8Gemm, EqualsFloat64OnTheDecodedOperands) {
  const std::uint64_t seed = fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t M = 19, N = 23, K = 70;
  const std::pair<DType, DType> pairs[] = {
      {DType::f8e4m3, DType::f8e4m3}, {DType::f8e5m2, DType::f8e4m3}, {DType::f8e4m3, DType::f8e5m2}};
  for (const auto& [fa, fb] : pairs) {
    SCOPED_TRACE(std::string(dtype_name(fa)) + " x " + std::string(dtype_name(fb)));
    const Tensor a = quantized(random_tensor({M, K}, seed, 1, -2.0f, 2.0f), fa, 64.0f);
    const Tensor b = quantized(random_tensor({N, K}, seed, 2, -2.0f, 2.0f), fb, 16.0f);
    const std::vector<double> da = to_f64(a), db = to_f64(b);
    const float alpha = 1.0f / (64.0f * 16.0f);
    std::vector<double> expected(static_cast<std::size_t>(M * N)), twice(expected.size());
    for (std::int64_t m = 0; m < M; ++m) {
      for (std::int64_t n = 0; n < N; ++n) {
        double sum = 0.0;
        for (std::int64_t k = 0; k < K; ++k) sum += da[m * K + k] * db[n * K + k];
        expected[m * N + n] = alpha * sum;
        twice[m * N + n] = 2 * alpha * sum;
      }
    }
    Tensor out = Tensor::full({M, N}, 99.0f);
    fp8_gemm(Fp8GemmArgs{}, a, scalar(1.0f / 64.0f), b, scalar(1.0f / 16.0f), out);
    expect_close(out, expected, 1e-5, 1e-5, "out");
    fp8_gemm(Fp8GemmArgs{.accumulate = true}, a, scalar(1.0f / 64.0f), b, scalar(1.0f / 16.0f), out);
    expect_close(out, twice, 1e-5, 1e-5, "accumulated out");
  }
}

TEST(Fp8Ops, RefusedArgumentsAreNamed) {
  const Tensor x = Tensor::zeros({4, 8});
  Tensor e4 = Tensor::empty({4, 8}, DType::f8e4m3), e5 = Tensor::empty({4, 8}, DType::f8e5m2), none;
  Tensor wrong_t = Tensor::empty({4, 8}, DType::f8e4m3), out = Tensor::zeros({4, 4});
  const Tensor one = scalar(1.0f);
  expect_error_naming([&] { fp8_quantize(x, scalar(0.0f), e4, none, none); }, {"fp8_quantize", "scale"});
  expect_error_naming([&] { fp8_quantize(x, Tensor::full({2}, 1.0), e4, none, none); }, {"fp8_quantize", "scale"});
  expect_error_naming([&] { fp8_quantize(x, one, e4, wrong_t, none); }, {"fp8_quantize", "out_t"});
  Tensor bf = Tensor::empty({4, 8}, DType::bf16);
  expect_error_naming([&] { fp8_quantize(x, one, bf, none, none); }, {"fp8_quantize", "out", "f8e4m3"});
  expect_error_naming([&] { fp8_gemm({}, e5, one, e5, one, out); }, {"fp8_gemm", "f8e5m2"});
  Tensor narrow = Tensor::empty({4, 7}, DType::f8e4m3);
  expect_error_naming([&] { fp8_gemm({}, e4, one, narrow, one, out); }, {"fp8_gemm", "differ in K"});
  expect_error_naming([&] { fp8_gemm({}, e4, none, e4, one, out); }, {"fp8_gemm", "a_dequant"});
  expect_error_naming([&] { fp8_gemm({}, e4, one, e4, scalar(INFINITY), out); }, {"fp8_gemm", "b_dequant"});
}

}  // namespace
}  // namespace myriad
