// softmax against a naive float64 reference: forward, backward (from the saved output) against
// central finite differences, large-magnitude and masked (-inf) inputs that must stay finite,
// in-place calls, and argument errors that name the op and the shapes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "myriad/ops/softmax.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using testing::expect_error_naming;
using testing::to_f64;

std::vector<double> reference_softmax(const std::vector<double>& x, std::int64_t length) {
  std::vector<double> out(x.size());
  const std::int64_t rows = static_cast<std::int64_t>(x.size()) / length;
  for (std::int64_t n = 0; n < rows; ++n) {
    const double* xr = x.data() + n * length;
    double max_value = *std::max_element(xr, xr + length), sum = 0.0;
    for (std::int64_t l = 0; l < length; ++l) sum += std::exp(xr[l] - max_value);
    for (std::int64_t l = 0; l < length; ++l) out[n * length + l] = std::exp(xr[l] - max_value) / sum;
  }
  return out;
}

// Probabilities are in (0, 1); f32 exp and an O(L) sum give errors of a few 1e-7 relative.
constexpr double kSoftmaxAtol = 1e-6, kSoftmaxRtol = 1e-5;

struct SoftmaxCase {
  Shape shape;
  float low, high;  // input range
};

class SoftmaxReference : public ::testing::TestWithParam<SoftmaxCase> {};

TEST_P(SoftmaxReference, ForwardAndBackwardMatchFloat64) {
  const SoftmaxCase p = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t length = p.shape.back();
  Tensor x = testing::random_tensor(p.shape, seed, 0, p.low, p.high);
  Tensor out = Tensor::full(p.shape, std::numeric_limits<double>::quiet_NaN());
  softmax_forward(SoftmaxArgs{}, x, out);
  std::vector<double> xv = to_f64(x);
  testing::expect_close(out, reference_softmax(xv, length), kSoftmaxAtol, kSoftmaxRtol, "softmax out");

  Tensor r = testing::random_tensor(p.shape, seed, 1);
  std::vector<double> rv = to_f64(r);
  Tensor grad_x = Tensor::full(p.shape, std::numeric_limits<double>::quiet_NaN());  // must be overwritten
  softmax_backward(SoftmaxArgs{}, out, r, grad_x);
  auto loss = [&](const std::vector<double>& v) { return testing::dot(reference_softmax(v, length), rv); };
  std::vector<double> fd = testing::numerical_gradient(loss, xv);
  testing::expect_close(grad_x, fd, kSoftmaxAtol, kSoftmaxRtol, "softmax grad_x");
  softmax_backward(SoftmaxArgs{}, out, r, grad_x);  // written, not accumulated
  testing::expect_close(grad_x, fd, kSoftmaxAtol, kSoftmaxRtol, "softmax grad_x after second backward");
}

// Ranges near +-1000: a naive exp would overflow to inf (or underflow every term to 0).
INSTANTIATE_TEST_SUITE_P(Shapes, SoftmaxReference,
                         ::testing::Values(SoftmaxCase{{3, 5}, -1, 1}, SoftmaxCase{{2, 3, 17}, -4, 4},
                                           SoftmaxCase{{4, 1}, -1, 1}, SoftmaxCase{{1}, -1, 1},
                                           SoftmaxCase{{2, 300}, -3, 3}, SoftmaxCase{{3, 9}, 990, 1010},
                                           SoftmaxCase{{3, 9}, -1010, -990}, SoftmaxCase{{2, 2, 6}, -1000, 1000}));

TEST(Softmax, MaskedEntriesGetZeroProbability) {
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<double> values{-inf, 0.5, -inf, 1.0, 1000.0, -inf, -inf, 999.0};
  Tensor x = testing::from_f64(values, {2, 4});
  Tensor out = Tensor::empty({2, 4});
  softmax_forward(SoftmaxArgs{}, x, out);
  const double e = std::exp(-0.5), f = std::exp(-1.0);
  testing::expect_close(out, {0, e / (1 + e), 0, 1 / (1 + e), 1 / (1 + f), 0, 0, f / (1 + f)}, 1e-7, 1e-6,
                        "masked softmax");
  Tensor dy = Tensor::full({2, 4}, 1.0), dx = Tensor::empty({2, 4});
  softmax_backward(SoftmaxArgs{}, out, dy, dx);  // constant grad_out: softmax sums to 1, so dx = 0
  testing::expect_close(dx, std::vector<double>(8, 0.0), 1e-7, 0, "masked softmax grad");
}

TEST(Softmax, InPlaceCallsMatchOutOfPlace) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Tensor x = testing::random_tensor({5, 13}, seed, 0, -3, 3), dy = testing::random_tensor({5, 13}, seed, 1);
  Tensor out = Tensor::empty({5, 13}), dx = Tensor::empty({5, 13});
  softmax_forward(SoftmaxArgs{}, x, out);
  softmax_backward(SoftmaxArgs{}, out, dy, dx);
  Tensor y = x.clone(), g = dy.clone();
  softmax_forward(SoftmaxArgs{}, y, y);
  softmax_backward(SoftmaxArgs{}, y, g, g);
  testing::expect_close(y, to_f64(out), 0, 0, "softmax in place");
  testing::expect_close(g, to_f64(dx), 0, 0, "softmax backward in place");
}

TEST(Softmax, MismatchesNameTheOpAndShapes) {
  Tensor x = Tensor::zeros({2, 3, 4}), out = Tensor::zeros({2, 3, 4}), bad = Tensor::zeros({2, 12});
  Tensor ints = Tensor::zeros({2, 3, 4}, DType::i32), none;
  expect_error_naming([&] { softmax_forward(SoftmaxArgs{}, x, bad); },
                      {"softmax_forward", "out", "[2, 12]", "[2, 3, 4]"});
  expect_error_naming([&] { softmax_forward(SoftmaxArgs{}, ints, out); },
                      {"softmax_forward", "'x'", "i32", "[2, 3, 4]"});
  Tensor empty_rows = Tensor::zeros({3, 0});
  expect_error_naming([&] { softmax_forward(SoftmaxArgs{}, empty_rows, empty_rows); }, {"softmax_forward", "[3, 0]"});
  Tensor strided = Tensor::zeros({4, 3, 2}).transpose(0, 2);
  expect_error_naming([&] { softmax_forward(SoftmaxArgs{}, strided, out); },
                      {"softmax_forward", "contiguous", "[2, 3, 4]"});
  expect_error_naming([&] { softmax_backward(SoftmaxArgs{}, out, bad, x); },
                      {"softmax_backward", "grad_out", "[2, 12]", "[2, 3, 4]"});
  expect_error_naming([&] { softmax_backward(SoftmaxArgs{}, out, ints, x); }, {"softmax_backward", "grad_out", "i32"});
  expect_error_naming([&] { softmax_backward(SoftmaxArgs{}, out, x, none); },
                      {"softmax_backward", "grad_x", "undefined"});
}

}  // namespace
}  // namespace myriad
