// grouped_matmul against a naive float64 per-group linear layer on fresh random inputs (empty
// groups first, inside and last, one group, bias or none), its backward against central finite
// differences of that code, the gradient contract (grad_x written or accumulated, grad_weight and
// grad_bias accumulated, an empty group's left bit-for-bit unchanged, undefined ones skipped),
// bf16 / f16 operands, a large case at the sgemm rate independent of the thread count, and the
// errors for bad offsets and mismatched operands.
#include <gtest/gtest.h>
#include <omp.h>

#include <bit>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "myriad/ops/grouped_matmul.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using testing::expect_error_naming;
using testing::to_f64;
using Offsets = std::vector<std::int64_t>;

// The bit patterns of n floats from p: equal vectors mean bit-for-bit equal values.
std::vector<std::uint32_t> float_bits(const float* p, std::int64_t n) {
  std::vector<std::uint32_t> bits(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) bits[static_cast<std::size_t>(i)] = std::bit_cast<std::uint32_t>(p[i]);
  return bits;
}

// out[r, m] = sum_k x[r, k] * W[g, m, k] + bias[g, m] for the rows r of group g.
std::vector<double> reference_grouped(const std::vector<double>& x, const std::vector<double>& w,
                                      const std::vector<double>& bias, const Offsets& offsets, std::int64_t k,
                                      std::int64_t m) {
  std::vector<double> out(offsets.back() * m, 0.0);
  for (std::size_t g = 0; g + 1 < offsets.size(); ++g)
    for (std::int64_t r = offsets[g]; r < offsets[g + 1]; ++r)
      for (std::int64_t j = 0; j < m; ++j) {
        double sum = bias.empty() ? 0.0 : bias[g * m + j];
        for (std::int64_t p = 0; p < k; ++p) sum += x[r * k + p] * w[(g * m + j) * k + p];
        out[r * m + j] = sum;
      }
  return out;
}

struct GroupedCase {
  Offsets offsets;
  std::int64_t k, m;
  bool bias;
};

void PrintTo(const GroupedCase& c, std::ostream* os) {
  *os << "offsets " << shape_string(c.offsets) << " K=" << c.k << " M=" << c.m << (c.bias ? " bias" : "");
}

class GroupedMatmulReference : public ::testing::TestWithParam<GroupedCase> {};

TEST_P(GroupedMatmulReference, ForwardAndBackwardMatchFloat64) {
  const GroupedCase c = GetParam();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const auto G = static_cast<std::int64_t>(c.offsets.size()) - 1, R = c.offsets.back();
  Tensor x = testing::random_tensor({R, c.k}, seed, 0), w = testing::random_tensor({G, c.m, c.k}, seed, 1);
  Tensor bias = c.bias ? testing::random_tensor({G, c.m}, seed, 2) : Tensor();
  const std::vector<double> xv = to_f64(x), wv = to_f64(w), bv = c.bias ? to_f64(bias) : std::vector<double>{};
  Tensor out = Tensor::full({R, c.m}, 7.0);
  grouped_matmul_forward(GroupedMatmulArgs{}, x, w, bias, c.offsets, out);
  testing::expect_close(out, reference_grouped(xv, wv, bv, c.offsets, c.k, c.m), 1e-5, 1e-5, "forward");

  // L = sum(out * g); every gradient by finite differences of the float64 reference.
  Tensor g = testing::random_tensor({R, c.m}, seed, 3);
  const std::vector<double> gv = to_f64(g);
  auto loss_x = [&](const std::vector<double>& v) {
    return testing::dot(reference_grouped(v, wv, bv, c.offsets, c.k, c.m), gv);
  };
  auto loss_w = [&](const std::vector<double>& v) {
    return testing::dot(reference_grouped(xv, v, bv, c.offsets, c.k, c.m), gv);
  };
  Tensor grad_x = Tensor::full({R, c.k}, 7.0), grad_w = Tensor::zeros({G, c.m, c.k});
  Tensor grad_b = c.bias ? Tensor::zeros({G, c.m}) : Tensor();
  grouped_matmul_backward(GroupedMatmulArgs{}, x, w, c.offsets, g, grad_x, grad_w, grad_b);
  testing::expect_close(grad_x, testing::numerical_gradient(loss_x, xv), 1e-5, 1e-5, "grad_x");
  testing::expect_close(grad_w, testing::numerical_gradient(loss_w, wv), 1e-5, 1e-5, "grad_weight");
  if (c.bias) {
    auto loss_b = [&](const std::vector<double>& v) {
      return testing::dot(reference_grouped(xv, wv, v, c.offsets, c.k, c.m), gv);
    };
    testing::expect_close(grad_b, testing::numerical_gradient(loss_b, bv), 1e-5, 1e-5, "grad_bias");
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, GroupedMatmulReference,
                         ::testing::Values(GroupedCase{{0, 7}, 5, 4, true}, GroupedCase{{0, 3, 3, 8, 12}, 4, 6, true},
                                           GroupedCase{{0, 0, 5, 9}, 3, 2, false},
                                           GroupedCase{{0, 4, 6, 6}, 6, 3, true}, GroupedCase{{0, 0, 0, 0}, 3, 4, true},
                                           GroupedCase{{0, 1, 2, 3, 4, 5}, 7, 1, true},
                                           GroupedCase{{0, 2, 9}, 1, 5, false}));

// grad_x written (=) unless accumulate_grad_x; grad_weight and grad_bias accumulate (+=); an
// empty group's grad_weight / grad_bias stay bit-for-bit what they were; undefined ones skipped.
TEST(GroupedMatmul, GradientContract) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const Offsets offsets{0, 4, 4, 9};
  const std::int64_t G = 3, R = 9, K = 5, M = 3;
  Tensor x = testing::random_tensor({R, K}, seed, 0), w = testing::random_tensor({G, M, K}, seed, 1);
  Tensor g = testing::random_tensor({R, M}, seed, 2);
  Tensor fresh_x = Tensor::empty({R, K}), fresh_w = Tensor::zeros({G, M, K}), fresh_b = Tensor::zeros({G, M});
  grouped_matmul_backward(GroupedMatmulArgs{}, x, w, offsets, g, fresh_x, fresh_w, fresh_b);
  const std::vector<double> once_x = to_f64(fresh_x), once_w = to_f64(fresh_w), once_b = to_f64(fresh_b);

  Tensor prior_x = testing::random_tensor({R, K}, seed, 3), prior_w = testing::random_tensor({G, M, K}, seed, 4);
  Tensor prior_b = testing::random_tensor({G, M}, seed, 5);
  Tensor grad_x = prior_x.clone(), grad_w = prior_w.clone(), grad_b = prior_b.clone();
  grouped_matmul_backward(GroupedMatmulArgs{}, x, w, offsets, g, grad_x, grad_w, grad_b);
  testing::expect_close(grad_x, once_x, 0, 0, "grad_x written");
  std::vector<double> sum_w = to_f64(prior_w), sum_b = to_f64(prior_b);
  for (std::size_t i = 0; i < sum_w.size(); ++i) sum_w[i] += once_w[i];
  for (std::size_t i = 0; i < sum_b.size(); ++i) sum_b[i] += once_b[i];
  testing::expect_close(grad_w, sum_w, 1e-6, 1e-6, "grad_weight accumulated");
  testing::expect_close(grad_b, sum_b, 1e-6, 1e-6, "grad_bias accumulated");
  // Group 1 is empty: its slices are exactly the prior values.
  EXPECT_EQ(float_bits(grad_w.data<float>() + M * K, M * K), float_bits(prior_w.data<float>() + M * K, M * K));
  EXPECT_EQ(float_bits(grad_b.data<float>() + M, M), float_bits(prior_b.data<float>() + M, M));

  Tensor acc_x = prior_x.clone(), skipped;
  grouped_matmul_backward(GroupedMatmulArgs{.accumulate_grad_x = true}, x, w, offsets, g, acc_x, skipped, skipped);
  std::vector<double> sum_x = to_f64(prior_x);
  for (std::size_t i = 0; i < sum_x.size(); ++i) sum_x[i] += once_x[i];
  testing::expect_close(acc_x, sum_x, 1e-6, 1e-6, "grad_x accumulated");

  Tensor only_w = Tensor::zeros({G, M, K});
  grouped_matmul_backward(GroupedMatmulArgs{}, x, w, offsets, g, skipped, only_w, skipped);
  testing::expect_close(only_w, once_w, 0, 0, "grad_weight alone");
}

// 16-bit operands: exact products of their values, f32 sums (the reference on the rounded values).
TEST(GroupedMatmul, SixteenBitOperandsAreExactProductsWithF32Sums) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const Offsets offsets{0, 6, 6, 13, 20};
  const std::int64_t G = 4, R = 20, K = 24, M = 10;
  for (DType type : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(type));
    Tensor x = testing::random_tensor({R, K}, seed, 0).to(type);
    Tensor w = testing::random_tensor({G, M, K}, seed, 1).to(type);
    Tensor bias = testing::random_tensor({G, M}, seed, 2);
    const std::vector<double> xv = to_f64(x), wv = to_f64(w), bv = to_f64(bias);
    Tensor out = Tensor::empty({R, M});
    grouped_matmul_forward(GroupedMatmulArgs{}, x, w, bias, offsets, out);
    testing::expect_close(out, reference_grouped(xv, wv, bv, offsets, K, M), 1e-5, 1e-5, "16-bit forward");
    Tensor g = testing::random_tensor({R, M}, seed, 3);
    const std::vector<double> gv = to_f64(g);
    Tensor grad_x = Tensor::empty({R, K}), grad_w = Tensor::zeros({G, M, K}), skipped;
    grouped_matmul_backward(GroupedMatmulArgs{}, x, w, offsets, g, grad_x, grad_w, skipped);
    auto loss_x = [&](const std::vector<double>& v) {
      return testing::dot(reference_grouped(v, wv, bv, offsets, K, M), gv);
    };
    auto loss_w = [&](const std::vector<double>& v) {
      return testing::dot(reference_grouped(xv, v, bv, offsets, K, M), gv);
    };
    testing::expect_close(grad_x, testing::numerical_gradient(loss_x, xv), 1e-5, 1e-5, "16-bit grad_x");
    testing::expect_close(grad_w, testing::numerical_gradient(loss_w, wv), 1e-5, 1e-5, "16-bit grad_weight");
  }
}

// Expert-sized groups (several sgemm blocks each), against float64, bit-identical over thread counts.
TEST(GroupedMatmul, LargeGroupsMatchFloat64AndAreThreadCountIndependent) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const Offsets offsets{0, 150, 150, 420, 431, 700};
  const std::int64_t G = 5, R = 700, K = 96, M = 80;
  Tensor x = testing::random_tensor({R, K}, seed, 0), w = testing::random_tensor({G, M, K}, seed, 1);
  Tensor bias = testing::random_tensor({G, M}, seed, 2), g = testing::random_tensor({R, M}, seed, 3);
  const std::vector<double> xv = to_f64(x), wv = to_f64(w), gv = to_f64(g);
  std::vector<double> expected_w(G * M * K, 0.0), expected_b(G * M, 0.0);
  for (std::int64_t gi = 0; gi < G; ++gi)
    for (std::int64_t r = offsets[gi]; r < offsets[gi + 1]; ++r)
      for (std::int64_t m = 0; m < M; ++m) {
        expected_b[gi * M + m] += gv[r * M + m];
        for (std::int64_t k = 0; k < K; ++k) expected_w[(gi * M + m) * K + k] += gv[r * M + m] * xv[r * K + k];
      }
  testing::ThreadCountGuard guard;
  std::vector<Tensor> first;
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    omp_set_num_threads(threads);
    Tensor out = Tensor::empty({R, M}), grad_x = Tensor::empty({R, K});
    Tensor grad_w = Tensor::zeros({G, M, K}), grad_b = Tensor::zeros({G, M});
    grouped_matmul_forward(GroupedMatmulArgs{}, x, w, bias, offsets, out);
    grouped_matmul_backward(GroupedMatmulArgs{}, x, w, offsets, g, grad_x, grad_w, grad_b);
    const std::vector<Tensor> results = {out, grad_x, grad_w, grad_b};
    if (first.empty()) {
      first = results;
      testing::expect_close(out, reference_grouped(xv, wv, to_f64(bias), offsets, K, M), 1e-4, 1e-5, "large forward");
      testing::expect_close(grad_w, expected_w, 1e-4, 1e-5, "large grad_weight");
      testing::expect_close(grad_b, expected_b, 1e-4, 1e-5, "large grad_bias");
      continue;
    }
    for (std::size_t i = 0; i < results.size(); ++i) {
      EXPECT_EQ(std::memcmp(first[i].raw_data(), results[i].raw_data(), first[i].nbytes()), 0)
          << "result " << i << " differs bitwise from the 1-thread result";
    }
  }
}

TEST(GroupedMatmul, BadOffsetsNameTheOpArgumentAndEntry) {
  Tensor x = Tensor::zeros({6, 4}), w = Tensor::zeros({3, 2, 4}), out = Tensor::zeros({6, 2});
  const auto forward = [&](const Offsets& offsets) {
    return [&, offsets] { grouped_matmul_forward(GroupedMatmulArgs{}, x, w, Tensor(), offsets, out); };
  };
  expect_error_naming(forward({0, 2, 6}), {"grouped_matmul_forward", "'offsets'", "3 entries", "G + 1 = 4"});
  expect_error_naming(forward({1, 2, 3, 6}), {"grouped_matmul_forward", "'offsets'", "start at 0", "offsets[0] = 1"});
  expect_error_naming(forward({0, 4, 3, 6}), {"'offsets'", "non-decreasing", "offsets[2] = 3", "offsets[1] = 4"});
  expect_error_naming(forward({0, 2, 3, 5}), {"'offsets'", "end at R = 6", "offsets[3] = 5"});
  Tensor g = Tensor::zeros({6, 2}), grad_x = Tensor::zeros({6, 4}), skipped;
  expect_error_naming(
      [&] {
        grouped_matmul_backward(GroupedMatmulArgs{}, x, w, {0, 2, 2, 7}, g, grad_x, skipped, skipped);
      },
      {"grouped_matmul_backward", "'offsets'", "end at R = 6"});
}

TEST(GroupedMatmul, MismatchesNameTheOpAndArgument) {
  const Offsets offsets{0, 3, 6};
  Tensor x = Tensor::zeros({6, 4}), w = Tensor::zeros({2, 5, 4}), out = Tensor::zeros({6, 5});
  Tensor w16 = Tensor::zeros({2, 5, 4}, DType::bf16);
  expect_error_naming([&] { grouped_matmul_forward(GroupedMatmulArgs{}, x, w16, Tensor(), offsets, out); },
                      {"grouped_matmul_forward", "weight bf16[2, 5, 4]", "both f32, both bf16 or both f16"});
  Tensor narrow_w = Tensor::zeros({2, 5, 3});
  expect_error_naming([&] { grouped_matmul_forward(GroupedMatmulArgs{}, x, narrow_w, Tensor(), offsets, out); },
                      {"grouped_matmul_forward", "'weight'", "[2, 5, 3]"});
  Tensor bad_bias = Tensor::zeros({2, 4});
  expect_error_naming([&] { grouped_matmul_forward(GroupedMatmulArgs{}, x, w, bad_bias, offsets, out); },
                      {"grouped_matmul_forward", "'bias'", "[2, 4]", "[2, 5]"});
  Tensor bad_out = Tensor::zeros({6, 4});
  expect_error_naming([&] { grouped_matmul_forward(GroupedMatmulArgs{}, x, w, Tensor(), offsets, bad_out); },
                      {"grouped_matmul_forward", "'out'", "[6, 4]", "[6, 5]"});
  Tensor g = Tensor::zeros({6, 5}), grad_w = Tensor::zeros({2, 4, 5}), skipped;
  expect_error_naming([&] { grouped_matmul_backward(GroupedMatmulArgs{}, x, w, offsets, g, skipped, grad_w, skipped); },
                      {"grouped_matmul_backward", "'grad_weight'", "[2, 4, 5]", "[2, 5, 4]"});
  Tensor g16 = Tensor::zeros({6, 5}, DType::bf16);
  expect_error_naming(
      [&] { grouped_matmul_backward(GroupedMatmulArgs{}, x, w, offsets, g16, skipped, skipped, skipped); },
      {"grouped_matmul_backward", "'grad_out'", "bf16", "f32"});
}

}  // namespace
}  // namespace myriad
