// matmul against a naive float64 matmul (all transpose combinations, batched, broadcast 2-D b,
// strided views, accumulate) and its backward against central finite differences.
#include <gtest/gtest.h>

#include "myriad/ops/matmul.h"
#include "reference.h"

namespace myriad {
namespace {

using testing::to_f64;

// Reference: out[b, m, n] = alpha * sum_k opA[b, m, k] * opB[b, k, n] for row-major inputs
// given as flat float64 vectors with explicit shapes.
std::vector<double> reference_matmul(const std::vector<double>& a, const Shape& a_shape, bool ta,
                                     const std::vector<double>& b, const Shape& b_shape, bool tb, double alpha) {
  int ar = static_cast<int>(a_shape.size()), br = static_cast<int>(b_shape.size());
  std::int64_t m = ta ? a_shape[ar - 1] : a_shape[ar - 2], k = ta ? a_shape[ar - 2] : a_shape[ar - 1];
  std::int64_t n = tb ? b_shape[br - 2] : b_shape[br - 1];
  std::int64_t batch = 1;
  for (int i = 0; i < ar - 2; ++i) batch *= a_shape[i];
  bool b_batched = br > 2;
  std::vector<double> out(batch * m * n, 0.0);
  for (std::int64_t bi = 0; bi < batch; ++bi) {
    const double* pa = a.data() + bi * m * k;
    const double* pb = b.data() + (b_batched ? bi * k * n : 0);
    for (std::int64_t i = 0; i < m; ++i)
      for (std::int64_t j = 0; j < n; ++j) {
        double sum = 0.0;
        for (std::int64_t p = 0; p < k; ++p) {
          double va = ta ? pa[p * m + i] : pa[i * k + p];
          double vb = tb ? pb[j * k + p] : pb[p * n + j];
          sum += va * vb;
        }
        out[bi * m * n + i * n + j] = alpha * sum;
      }
  }
  return out;
}

struct MatmulCase {
  Shape batch;
  std::int64_t m, k, n;
  bool ta, tb, b_batched;
};

Shape operand_shape(const Shape& batch, std::int64_t rows, std::int64_t cols, bool batched) {
  Shape s = batched ? batch : Shape{};
  s.push_back(rows);
  s.push_back(cols);
  return s;
}

class MatmulReference : public ::testing::TestWithParam<MatmulCase> {};

TEST_P(MatmulReference, ForwardAndBackwardMatchFloat64) {
  const MatmulCase c = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Shape a_shape = operand_shape(c.batch, c.ta ? c.k : c.m, c.ta ? c.m : c.k, true);
  Shape b_shape = operand_shape(c.batch, c.tb ? c.n : c.k, c.tb ? c.k : c.n, c.b_batched);
  Shape out_shape = operand_shape(c.batch, c.m, c.n, true);
  Tensor a = testing::random_tensor(a_shape, seed, 0);
  Tensor b = testing::random_tensor(b_shape, seed, 1);
  MatmulArgs args{.transpose_a = c.ta, .transpose_b = c.tb, .alpha = 0.75f};
  Tensor out = Tensor::empty(out_shape);
  matmul_forward(args, a, b, out);
  std::vector<double> expected = reference_matmul(to_f64(a), a_shape, c.ta, to_f64(b), b_shape, c.tb, 0.75);
  testing::expect_close(out, expected, 1e-5, 1e-5, "matmul forward");

  // Backward of L = sum(out * r) for a random r; finite differences of the float64 reference.
  Tensor r = testing::random_tensor(out_shape, seed, 2);
  std::vector<double> rv = to_f64(r), av = to_f64(a), bv = to_f64(b);
  Tensor grad_a = Tensor::empty(a_shape), grad_b = Tensor::empty(b_shape);
  matmul_backward(args, a, b, r, grad_a, grad_b);
  auto loss_a = [&](const std::vector<double>& x) {
    return testing::dot(reference_matmul(x, a_shape, c.ta, bv, b_shape, c.tb, 0.75), rv);
  };
  auto loss_b = [&](const std::vector<double>& x) {
    return testing::dot(reference_matmul(av, a_shape, c.ta, x, b_shape, c.tb, 0.75), rv);
  };
  testing::expect_close(grad_a, testing::numerical_gradient(loss_a, av), 1e-5, 1e-5, "grad_a");
  testing::expect_close(grad_b, testing::numerical_gradient(loss_b, bv), 1e-5, 1e-5, "grad_b");

  // Accumulate flags add to what is there.
  Tensor grad_b2 = grad_b.clone();
  MatmulArgs acc = args;
  acc.accumulate_grad_b = true;
  Tensor no_grad_a;
  matmul_backward(acc, a, b, r, no_grad_a, grad_b2);
  std::vector<double> doubled = to_f64(grad_b);
  for (double& v : doubled) v *= 2.0;
  testing::expect_close(grad_b2, doubled, 1e-5, 1e-5, "accumulated grad_b");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, MatmulReference,
    ::testing::Values(MatmulCase{{}, 5, 7, 3, false, false, true}, MatmulCase{{}, 5, 7, 3, true, false, true},
                      MatmulCase{{}, 5, 7, 3, false, true, true}, MatmulCase{{}, 5, 7, 3, true, true, true},
                      MatmulCase{{3}, 4, 6, 5, false, false, true}, MatmulCase{{2, 3}, 4, 6, 5, true, true, true},
                      MatmulCase{{2, 3}, 4, 6, 5, false, false, false}, MatmulCase{{2, 3}, 4, 6, 5, false, true, false},
                      MatmulCase{{4}, 3, 8, 2, true, false, false}, MatmulCase{{4}, 1, 8, 1, true, true, false}));

TEST(Matmul, StridedViewsNeedNoCopyAndAreCorrect) {
  // q and k as permuted views of (B, T, H, D): (B, H, T, D) @ (B, H, D, T) via transpose_b.
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t B = 2, T = 5, H = 3, D = 4;
  Tensor q = testing::random_tensor({B, T, H, D}, seed, 0).permute({0, 2, 1, 3});
  Tensor k = testing::random_tensor({B, T, H, D}, seed, 1).permute({0, 2, 1, 3});
  Tensor scores = Tensor::empty({B, H, T, T});
  matmul_forward(MatmulArgs{.transpose_b = true}, q, k, scores);
  std::vector<double> expected = reference_matmul(to_f64(q), {B, H, T, D}, false, to_f64(k), {B, H, T, D}, true, 1.0);
  testing::expect_close(scores, expected, 1e-5, 1e-5, "strided q @ k^T");
  // A fully strided operand (no unit stride) is copied and still correct.
  Tensor wide = testing::random_tensor({6, 8}, seed, 2);
  Tensor strided = Tensor::from_storage(wide.storage(), {3, 4}, {16, 2}, 0, DType::f32);
  Tensor eye = Tensor::zeros({4, 4});
  for (int i = 0; i < 4; ++i) eye.set({i, i}, 1.0);
  Tensor out = Tensor::empty({3, 4});
  matmul_forward(MatmulArgs{}, strided, eye, out);
  testing::expect_close(out, to_f64(strided), 0, 0, "stride-2 operand times identity");
}

TEST(Matmul, ForwardAccumulates) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Tensor a = testing::random_tensor({4, 3}, seed, 0), b = testing::random_tensor({3, 2}, seed, 1);
  Tensor out = Tensor::full({4, 2}, 1.0);
  matmul_forward(MatmulArgs{.accumulate = true}, a, b, out);
  std::vector<double> expected = reference_matmul(to_f64(a), {4, 3}, false, to_f64(b), {3, 2}, false, 1.0);
  for (double& v : expected) v += 1.0;
  testing::expect_close(out, expected, 1e-6, 1e-6, "accumulate");
}

TEST(Matmul, MismatchesNameTheOpAndShapes) {
  Tensor a = Tensor::zeros({4, 3}), b = Tensor::zeros({5, 2}), out = Tensor::zeros({4, 2});
  try {
    matmul_forward(MatmulArgs{}, a, b, out);
    FAIL() << "inner-dimension mismatch did not throw";
  } catch (const Error& e) {
    std::string what = e.what();
    EXPECT_NE(what.find("matmul_forward"), std::string::npos) << what;
    EXPECT_NE(what.find("[4, 3]"), std::string::npos) << what;
    EXPECT_NE(what.find("[5, 2]"), std::string::npos) << what;
  }
  Tensor bad_out = Tensor::zeros({4, 3});
  Tensor good_b = Tensor::zeros({3, 2});
  EXPECT_THROW(matmul_forward(MatmulArgs{}, a, good_b, bad_out), Error);
  Tensor ints = Tensor::zeros({3, 2}, DType::i32);
  EXPECT_THROW(matmul_forward(MatmulArgs{}, a, ints, out), Error);
  Tensor bf16_b = Tensor::zeros({3, 2}, DType::bf16);
  EXPECT_THROW(matmul_forward(MatmulArgs{}, a, bf16_b, out), Error);  // mixed operand types
}

// 16-bit operands: the products of their exact values summed in f32 (float64 reference of the
// rounded operands), every transposition, forward and backward (grad_out of the operands' type;
// gradients f32, written or accumulated).
TEST(Matmul, SixteenBitOperandsSumTheirExactValuesInF32) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t M = 6, K = 40, N = 5;
  for (DType type : {DType::bf16, DType::f16}) {
    for (bool ta : {false, true}) {
      for (bool tb : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(type)) + (ta ? " ta" : "") + (tb ? " tb" : ""));
        const Tensor a = testing::random_tensor(ta ? Shape{K, M} : Shape{M, K}, seed, 0).to(type);
        const Tensor b = testing::random_tensor(tb ? Shape{N, K} : Shape{K, N}, seed, 1).to(type);
        const Tensor g = testing::random_tensor({M, N}, seed, 2).to(type);
        const std::vector<double> va = to_f64(a), vb = to_f64(b), vg = to_f64(g);  // the rounded values
        Tensor out = Tensor::empty({M, N});
        matmul_forward(MatmulArgs{.transpose_a = ta, .transpose_b = tb}, a, b, out);
        testing::expect_close(out, reference_matmul(va, a.shape(), ta, vb, b.shape(), tb, 1.0), 1e-5, 1e-5, "out");
        // d/da sum(g * out) = g op(b)^T (then transposed for a stored (K, M)); likewise for b.
        Tensor grad_a = Tensor::zeros(a.shape()), grad_b = Tensor::zeros(b.shape());
        matmul_backward(MatmulArgs{.transpose_a = ta, .transpose_b = tb, .accumulate_grad_b = true}, a, b, g, grad_a,
                        grad_b);
        const auto loss_a = [&](const std::vector<double>& x) {
          return testing::dot(vg, reference_matmul(x, a.shape(), ta, vb, b.shape(), tb, 1.0));
        };
        const auto loss_b = [&](const std::vector<double>& x) {
          return testing::dot(vg, reference_matmul(va, a.shape(), ta, x, b.shape(), tb, 1.0));
        };
        testing::expect_close(grad_a, testing::numerical_gradient(loss_a, va), 1e-4, 1e-4, "grad_a");
        testing::expect_close(grad_b, testing::numerical_gradient(loss_b, vb), 1e-4, 1e-4, "grad_b");
        Tensor f32_grad = Tensor::empty({M, N});
        EXPECT_THROW(matmul_backward(MatmulArgs{.transpose_a = ta, .transpose_b = tb}, a, b, f32_grad, grad_a, grad_b),
                     Error);  // grad_out must have the operands' type
      }
    }
  }
}

}  // namespace
}  // namespace myriad
