// The ops mixed precision's 16-bit residual stream runs through: LayerNorm and RMSNorm reading a
// bf16 / f16 x (forward, with an f32 or a 16-bit out, and backward) give bit for bit the op's
// result on the f32 tensor of x's exactly widened values; add_forward with a 16-bit b gives the
// f32 sum on the widened b, and with a 16-bit out the f32 sum rounded once to nearest even (the
// values round_to_format gives); two 16-bit formats at once are refused naming the arguments.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>

#include "myriad/ops/elementwise.h"
#include "myriad/ops/norms.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using testing::expect_error_naming;
using testing::to_f64;

void expect_same_bits(const Tensor& got, const Tensor& want, const char* what) {
  ASSERT_EQ(got.dtype(), want.dtype()) << what;
  ASSERT_EQ(got.nbytes(), want.nbytes()) << what;
  EXPECT_EQ(std::memcmp(got.raw_data(), want.raw_data(), want.nbytes()), 0)
      << what << " (" << dtype_name(got.dtype()) << "): not bit for bit";
}

class SixteenBitResidual : public ::testing::TestWithParam<DType> {};

TEST_P(SixteenBitResidual, NormsReadTheStreamWidened) {
  const DType format = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t B = 3, T = 5, C = 24;
  const Tensor x = testing::random_tensor({B, T, C}, seed, 0).to(format), wide = x.to(DType::f32);
  const Tensor w = testing::random_tensor({C}, seed, 1), b = testing::random_tensor({C}, seed, 2);
  const Tensor grad_out = testing::random_tensor({B, T, C}, seed, 3);
  for (DType out_format : {DType::f32, format}) {
    Tensor out = Tensor::empty({B, T, C}, out_format), mean = Tensor::empty({B, T}), rstd = Tensor::empty({B, T});
    Tensor want = Tensor::empty({B, T, C}, out_format), want_mean = Tensor::empty({B, T}),
           want_rstd = Tensor::empty({B, T});
    layernorm_forward(LayernormArgs{}, x, w, b, out, mean, rstd);
    layernorm_forward(LayernormArgs{}, wide, w, b, want, want_mean, want_rstd);
    expect_same_bits(out, want, "layernorm out");
    expect_same_bits(mean, want_mean, "layernorm mean");
    expect_same_bits(rstd, want_rstd, "layernorm rstd");
    rmsnorm_forward(RmsnormArgs{}, x, w, out, rstd);
    rmsnorm_forward(RmsnormArgs{}, wide, w, want, want_rstd);
    expect_same_bits(out, want, "rmsnorm out");
    expect_same_bits(rstd, want_rstd, "rmsnorm rstd");
  }
  Tensor mean = Tensor::empty({B, T}), rstd = Tensor::empty({B, T}), none;
  Tensor h = Tensor::empty({B, T, C});
  layernorm_forward(LayernormArgs{}, x, w, b, h, mean, rstd);
  Tensor gx = Tensor::empty({B, T, C}), gw = Tensor::zeros({C}), gb = Tensor::zeros({C});
  Tensor want_gx = Tensor::empty({B, T, C}), want_gw = Tensor::zeros({C}), want_gb = Tensor::zeros({C});
  layernorm_backward(LayernormArgs{}, x, w, mean, rstd, grad_out, gx, gw, gb);
  layernorm_backward(LayernormArgs{}, wide, w, mean, rstd, grad_out, want_gx, want_gw, want_gb);
  expect_same_bits(gx, want_gx, "layernorm grad_x");
  expect_same_bits(gw, want_gw, "layernorm grad_weight");
  expect_same_bits(gb, want_gb, "layernorm grad_bias");
  rmsnorm_forward(RmsnormArgs{}, x, w, h, rstd);
  zero(gw);
  zero(want_gw);
  rmsnorm_backward(RmsnormArgs{}, x, w, rstd, grad_out, gx, gw);
  rmsnorm_backward(RmsnormArgs{}, wide, w, rstd, grad_out, want_gx, want_gw);
  expect_same_bits(gx, want_gx, "rmsnorm grad_x");
  expect_same_bits(gw, want_gw, "rmsnorm grad_weight");
  // The float64 reference of the forward: the widened values normalised (a check that cannot be
  // satisfied by reading the 16-bit bits as anything else).
  layernorm_forward(LayernormArgs{}, x, w, b, h, mean, rstd);
  const std::vector<double> xs = to_f64(wide), ws = to_f64(w), bs = to_f64(b), hs = to_f64(h);
  for (std::int64_t row = 0; row < B * T; ++row) {
    double m = 0, v = 0;
    for (std::int64_t c = 0; c < C; ++c) m += xs[row * C + c] / C;
    for (std::int64_t c = 0; c < C; ++c) v += (xs[row * C + c] - m) * (xs[row * C + c] - m) / C;
    for (std::int64_t c = 0; c < C; ++c) {
      const double want = (xs[row * C + c] - m) / std::sqrt(v + 1e-5) * ws[c] + bs[c];
      EXPECT_NEAR(hs[row * C + c], want, 1e-5 * (1 + std::abs(want))) << "row " << row << " channel " << c;
    }
  }
}

TEST_P(SixteenBitResidual, ResidualAddsReadAndWriteTheFormat) {
  const DType format = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t n = 1000;
  const Tensor a = testing::random_tensor({n}, seed, 0), b = testing::random_tensor({n}, seed, 1).to(format);
  const Tensor wide_b = b.to(DType::f32);
  Tensor sum = Tensor::empty({n}), want = Tensor::empty({n});
  add_forward(AddArgs{}, a, b, sum);  // x_mid = proj + x (x the 16-bit stream)
  add_forward(AddArgs{}, a, wide_b, want);
  expect_same_bits(sum, want, "f32 out from a 16-bit b");
  Tensor in_place = a.clone();
  add_forward(AddArgs{}, in_place, b, in_place);
  expect_same_bits(in_place, want, "in place into a");
  Tensor rounded = Tensor::empty({n}, format);  // y = x_mid + mlp, rounded once into the stream
  add_forward(AddArgs{}, a, wide_b, rounded);
  Tensor reference = want.clone();
  round_to_format(reference, format);
  expect_same_bits(rounded, reference.to(format), "16-bit out");
  // Overflow in f16 becomes inf, as round_to_format makes it (the loss scaler's signal).
  if (format == DType::f16) {
    Tensor big = Tensor::full({n}, 60000.0), out = Tensor::empty({n}, DType::f16);
    add_forward(AddArgs{}, big, big, out);
    EXPECT_TRUE(std::isinf(to_f64(out)[0]));
  }
  Tensor both = Tensor::empty({n}, format);
  expect_error_naming([&] { add_forward(AddArgs{}, a, b, both); }, {"add_forward", "both 16-bit"});
}

TEST(SixteenBitResidual, TwoFormatsAtOnceAreRefused) {
  const Tensor x = Tensor::zeros({2, 4}, DType::bf16), w = Tensor::full({4}, 1.0);
  Tensor out = Tensor::empty({2, 4}, DType::f16), none;
  expect_error_naming([&] { layernorm_forward(LayernormArgs{}, x, w, Tensor(), out, none, none); },
                      {"layernorm_forward", "'x'", "'out'", "two different 16-bit formats"});
  expect_error_naming([&] { rmsnorm_forward(RmsnormArgs{}, x, w, out, none); }, {"rmsnorm_forward", "'x'", "'out'"});
  const Tensor ids = Tensor::zeros({2, 4}, DType::i32);
  Tensor h = Tensor::empty({2, 4});
  expect_error_naming([&] { layernorm_forward(LayernormArgs{}, ids, w, Tensor(), h, none, none); },
                      {"layernorm_forward", "'x'", "must be f32, bf16 or f16"});
}

INSTANTIATE_TEST_SUITE_P(Formats, SixteenBitResidual, ::testing::Values(DType::bf16, DType::f16),
                         [](const ::testing::TestParamInfo<DType>& info) {
                           return std::string(dtype_name(info.param));
                         });

}  // namespace
}  // namespace myriad
