// cross_entropy against a float64 logsumexp reference (losses and lse), its backward against
// central finite differences of that reference (ignored rows included), large logits, the
// valid-target count, and the errors for bad targets and mismatched shapes / dtypes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <initializer_list>
#include <ostream>
#include <string>

#include "myriad/ops/cross_entropy.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using testing::expect_error_naming;
using testing::to_f64;

struct CrossEntropyExpected {
  std::vector<double> losses, lse;
};

// Float64 per-row logsumexp with max subtraction; loss = lse - x[target], 0 for ignored rows.
CrossEntropyExpected reference_cross_entropy(const std::vector<double>& logits,
                                             const std::vector<std::int32_t>& targets, std::int64_t vocab,
                                             std::int32_t ignore_index) {
  const std::size_t rows = targets.size();
  CrossEntropyExpected ref{std::vector<double>(rows), std::vector<double>(rows)};
  for (std::size_t n = 0; n < rows; ++n) {
    const double* x = logits.data() + n * vocab;
    const double max = *std::max_element(x, x + vocab);
    double sum = 0.0;
    for (std::int64_t v = 0; v < vocab; ++v) sum += std::exp(x[v] - max);
    ref.lse[n] = max + std::log(sum);
    ref.losses[n] = targets[n] == ignore_index ? 0.0 : ref.lse[n] - x[targets[n]];
  }
  return ref;
}

// Analytic float64 gradient: (softmax - onehot) * grad_losses[n], 0 for ignored rows; softmax at
// `lse` when given (the forward's stored one), else at the exact log-sum-exp.
std::vector<double> reference_grad(const std::vector<double>& logits, const std::vector<std::int32_t>& targets,
                                   std::int64_t vocab, std::int32_t ignore_index, const std::vector<double>& g,
                                   const std::vector<double>& lse = {}) {
  CrossEntropyExpected ref = reference_cross_entropy(logits, targets, vocab, ignore_index);
  if (!lse.empty()) ref.lse = lse;
  std::vector<double> grad(logits.size(), 0.0);
  for (std::size_t n = 0; n < targets.size(); ++n) {
    if (targets[n] == ignore_index) continue;
    for (std::int64_t v = 0; v < vocab; ++v) {
      grad[n * vocab + v] = (std::exp(logits[n * vocab + v] - ref.lse[n]) - (v == targets[n] ? 1.0 : 0.0)) * g[n];
    }
  }
  return grad;
}

std::vector<std::int32_t> ids_vector(const Tensor& ids) {
  const std::int32_t* p = ids.data<std::int32_t>();
  return std::vector<std::int32_t>(p, p + ids.numel());
}

// Random targets in [0, V) with every `ignore_every`-th row (0: none) set to ignore_index.
Tensor make_targets(std::int64_t rows, std::int64_t vocab, std::int32_t ignore_index, int ignore_every,
                    std::uint64_t seed) {
  Tensor targets = testing::random_ids({rows}, static_cast<std::int32_t>(vocab), seed, 10);
  for (std::int64_t n = 0; ignore_every > 0 && n < rows; n += ignore_every) targets.set({n}, ignore_index);
  return targets;
}

struct CrossEntropyCase {
  std::int64_t rows, vocab;
  std::int32_t ignore_index;
  int ignore_every;  // every k-th row (from row 0) is ignored; 0 = none
};

void PrintTo(const CrossEntropyCase& c, std::ostream* os) {
  *os << "N=" << c.rows << " V=" << c.vocab << " ignore_index=" << c.ignore_index << " every " << c.ignore_every;
}

class CrossEntropyReference : public ::testing::TestWithParam<CrossEntropyCase> {};

TEST_P(CrossEntropyReference, ForwardAndBackwardMatchFloat64) {
  const CrossEntropyCase c = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const CrossEntropyArgs args{.ignore_index = c.ignore_index};
  Tensor logits = testing::random_tensor({c.rows, c.vocab}, seed, 0, -4.0f, 4.0f);
  Tensor targets = make_targets(c.rows, c.vocab, c.ignore_index, c.ignore_every, seed);
  Tensor losses = Tensor::empty({c.rows}), lse = Tensor::empty({c.rows});
  cross_entropy_forward(args, logits, targets, losses, lse);
  const std::vector<double> x = to_f64(logits);
  const std::vector<std::int32_t> t = ids_vector(targets);
  const CrossEntropyExpected ref = reference_cross_entropy(x, t, c.vocab, c.ignore_index);
  // f32 logits in [-4, 4], exps summed in float64: error is the f32 rounding of the result.
  testing::expect_close(losses, ref.losses, 1e-6, 1e-6, "losses");
  testing::expect_close(lse, ref.lse, 1e-6, 1e-6, "lse");

  // L = sum(losses * r) with r = grad_losses; its gradient w.r.t. logits by central differences.
  Tensor grad_losses = testing::random_tensor({c.rows}, seed, 1);
  const std::vector<double> r = to_f64(grad_losses);
  Tensor grad_logits = Tensor::full({c.rows, c.vocab}, 123.0);  // written, not accumulated
  cross_entropy_backward(args, logits, targets, lse, grad_losses, grad_logits);
  std::vector<double> expected;
  if (c.rows * c.vocab <= 400) {
    auto loss = [&](const std::vector<double>& xv) {
      return testing::dot(reference_cross_entropy(xv, t, c.vocab, c.ignore_index).losses, r);
    };
    expected = testing::numerical_gradient(loss, x);
  } else {  // too many logits for finite differences: the analytic float64 gradient
    expected = reference_grad(x, t, c.vocab, c.ignore_index, r);
  }
  testing::expect_close(grad_logits, expected, 1e-6, 1e-5, "grad_logits");
  // Ignored rows have exactly zero loss and gradient.
  const std::vector<double> got = to_f64(grad_logits), got_losses = to_f64(losses);
  for (std::int64_t n = 0; n < c.rows; ++n) {
    if (t[n] != c.ignore_index) continue;
    EXPECT_EQ(got_losses[n], 0.0) << "row " << n;
    for (std::int64_t v = 0; v < c.vocab; ++v) ASSERT_EQ(got[n * c.vocab + v], 0.0) << "row " << n << " col " << v;
  }
}

// V = 1 (loss and gradient 0), odd sizes, a custom ignore index and a size above the threads'
// threshold (checked against the analytic gradient).
INSTANTIATE_TEST_SUITE_P(Shapes, CrossEntropyReference,
                         ::testing::Values(CrossEntropyCase{3, 1, -100, 0}, CrossEntropyCase{7, 13, -100, 3},
                                           CrossEntropyCase{5, 64, -1, 2}, CrossEntropyCase{1, 37, -100, 0},
                                           CrossEntropyCase{4, 1000, -100, 4}, CrossEntropyCase{0, 9, -100, 0},
                                           CrossEntropyCase{67, 3001, 5, 5}));

// Rows padded past the classes (args.classes, the model's padded vocabulary): the padding (huge
// values here) never enters lse or the loss, its gradient is written 0 — in place too — and the
// real columns equal the unpadded op on the same values, bit for bit.
TEST(CrossEntropy, PaddedRowsLeaveThePaddingOutAndZeroItsGradient) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t rows = 37, vocab = 1001, width = 1024;
  Tensor real = testing::random_tensor({rows, vocab}, seed, 0, -4.0f, 4.0f);
  Tensor padded = Tensor::full({rows, width}, 1e30);
  padded.slice(1, 0, vocab).copy_from(real);
  Tensor targets = make_targets(rows, vocab, -100, 6, seed);
  Tensor grad_losses = testing::random_tensor({rows}, seed, 1);
  const CrossEntropyArgs plain{}, args{.classes = vocab};
  Tensor losses = Tensor::empty({rows}), lse = Tensor::empty({rows});
  Tensor want_losses = Tensor::empty({rows}), want_lse = Tensor::empty({rows});
  cross_entropy_forward(args, padded, targets, losses, lse);
  cross_entropy_forward(plain, real, targets, want_losses, want_lse);
  EXPECT_EQ(to_f64(losses), to_f64(want_losses));
  EXPECT_EQ(to_f64(lse), to_f64(want_lse));
  const CrossEntropyExpected ref = reference_cross_entropy(to_f64(real), ids_vector(targets), vocab, -100);
  testing::expect_close(losses, ref.losses, 1e-6, 1e-6, "losses");

  Tensor want_grad = Tensor::empty({rows, vocab});
  cross_entropy_backward(plain, real, targets, want_lse, grad_losses, want_grad);
  cross_entropy_backward(args, padded, targets, lse, grad_losses, padded);  // in place, as the model runs it
  EXPECT_EQ(to_f64(padded.slice(1, 0, vocab)), to_f64(want_grad));
  const std::vector<double> padding = to_f64(padded.slice(1, vocab, width));
  EXPECT_TRUE(std::all_of(padding.begin(), padding.end(), [](double v) { return v == 0.0; }));
  testing::expect_close(want_grad, reference_grad(to_f64(real), ids_vector(targets), vocab, -100, to_f64(grad_losses)),
                        1e-6, 1e-5, "grad_logits");

  Tensor bad = Tensor::full({rows}, static_cast<double>(vocab + 3), DType::i32);  // a padding column as target
  expect_error_naming([&] { cross_entropy_forward(args, padded, bad, losses, lse); },
                      {"cross_entropy_forward", "outside [0, V) with V = 1001"});
  expect_error_naming(
      [&] { cross_entropy_forward(CrossEntropyArgs{.classes = width + 1}, padded, targets, losses, lse); },
      {"cross_entropy_forward", "classes 1025", "[0, 1024]"});
}

TEST(CrossEntropy, LargeLogitsStayFiniteAndAccurate) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t rows = 9, vocab = 257;
  const CrossEntropyArgs args{};
  for (float shift : {1000.0f, -1000.0f}) {
    SCOPED_TRACE("shift " + std::to_string(shift));
    // Spread over [-1000, 1000] (most probabilities underflow), or +-1000 + [-3, 3] (exp overflows
    // without max subtraction).
    Tensor wide = testing::random_tensor({rows, vocab}, seed, 0, -1000.0f, 1000.0f);
    Tensor shifted = testing::random_tensor({rows, vocab}, seed, 1, shift - 3.0f, shift + 3.0f);
    for (const Tensor& logits : {wide, shifted}) {
      Tensor targets = make_targets(rows, vocab, args.ignore_index, 4, seed);
      Tensor losses = Tensor::empty({rows}), lse = Tensor::empty({rows});
      cross_entropy_forward(args, logits, targets, losses, lse);
      const std::vector<double> x = to_f64(logits), got_losses = to_f64(losses);
      const std::vector<std::int32_t> t = ids_vector(targets);
      for (double l : got_losses) ASSERT_TRUE(std::isfinite(l)) << "loss " << l;
      const CrossEntropyExpected ref = reference_cross_entropy(x, t, vocab, args.ignore_index);
      // The loss keeps (max - x[target]) apart from log(sum), so it stays accurate to f32 rounding;
      // lse ~ 1e3 is stored in f32: ulp(1024) / 2 = 6.1e-5.
      testing::expect_close(got_losses, ref.losses, 1e-5, 1e-6, "large-logit losses");
      testing::expect_close(lse, ref.lse, 6.2e-5, 0, "large-logit lse");
      Tensor grad_losses = testing::random_tensor({rows}, seed, 2);
      Tensor grad_logits = Tensor::empty({rows, vocab});
      cross_entropy_backward(args, logits, targets, lse, grad_losses, grad_logits);
      const std::vector<double> got = to_f64(grad_logits);
      for (double g : got) ASSERT_TRUE(std::isfinite(g)) << "grad " << g;
      // The backward uses the forward's f32 lse (checked above to 6.2e-5): compared at that lse, what
      // remains is f32 exp and arithmetic. (At the exact lse, the target's g (p - 1) with p near 1
      // would differ by up to 6.1e-5 |g| absolute: lse's rounding, not the backward's.)
      testing::expect_close(got, reference_grad(x, t, vocab, args.ignore_index, to_f64(grad_losses), to_f64(lse)), 1e-6,
                            1e-4, "large-logit grad_logits");
    }
  }
}

TEST(CrossEntropy, ANanLogitMakesItsRowsLossNanAndLeavesTheOthers) {
  // The row max skips NaN (row_max.h); the NaN must still reach the loss through exp(NaN - max), at
  // any position of the row (the first element, one inside a vector, the scalar tail) and for rows
  // that are all NaN, while the other rows keep their float64 values.
  const std::int64_t rows = 5, vocab = 37;
  const CrossEntropyArgs args{};
  Tensor logits = testing::random_tensor({rows, vocab}, 11, 0, -4.0f, 4.0f);
  float* x = logits.data<float>();
  x[0 * vocab + 0] = std::nanf("");
  x[1 * vocab + 9] = std::nanf("");
  x[2 * vocab + vocab - 1] = std::nanf("");
  for (std::int64_t v = 0; v < vocab; ++v) x[3 * vocab + v] = std::nanf("");
  Tensor targets = make_targets(rows, vocab, args.ignore_index, 0, 3);
  Tensor losses = Tensor::empty({rows}), lse = Tensor::empty({rows});
  cross_entropy_forward(args, logits, targets, losses, lse);
  const std::vector<double> got = to_f64(losses), got_lse = to_f64(lse);
  for (std::int64_t n = 0; n < 4; ++n) EXPECT_TRUE(std::isnan(got[n]) && std::isnan(got_lse[n])) << "row " << n;
  const std::vector<double> all = to_f64(logits);
  const std::vector<double> last(all.end() - vocab, all.end());
  const std::vector<std::int32_t> t = ids_vector(targets);
  const CrossEntropyExpected ref = reference_cross_entropy(last, {t.back()}, vocab, args.ignore_index);
  EXPECT_NEAR(got.back(), ref.losses[0], 1e-5 * std::max(1.0, std::fabs(ref.losses[0])));
}

TEST(CrossEntropy, CountValidTargets) {
  Tensor targets = Tensor::zeros({2, 4}, DType::i32);
  targets.set({0, 1}, -100);
  targets.set({1, 3}, -100);
  targets.set({1, 0}, 7);
  EXPECT_EQ(count_valid_targets(targets, -100), 6);
  EXPECT_EQ(count_valid_targets(targets, 0), 3);
  EXPECT_EQ(count_valid_targets(targets.transpose(0, 1), 7), 7);
  Tensor floats = Tensor::zeros({3});
  expect_error_naming([&] { count_valid_targets(floats, -100); }, {"count_valid_targets", "targets", "f32"});
}

TEST(CrossEntropy, BadTargetNamesRowAndValue) {
  Tensor logits = Tensor::zeros({5, 13}), losses = Tensor::full({5}, 3.0), lse = Tensor::empty({5});
  Tensor targets = Tensor::zeros({5}, DType::i32);
  targets.set({2}, 13);
  expect_error_naming([&] { cross_entropy_forward(CrossEntropyArgs{}, logits, targets, losses, lse); },
                      {"cross_entropy_forward", "target 13", "row 2", "V = 13"});
  testing::expect_close(losses, std::vector<double>(5, 3.0), 0, 0, "losses untouched after a bad target");
  // -1 is an error unless it is the ignore index.
  targets.set({2}, 0);
  targets.set({4}, -1);
  expect_error_naming([&] { cross_entropy_forward(CrossEntropyArgs{}, logits, targets, losses, lse); },
                      {"target -1", "row 4", "ignore index -100"});
  EXPECT_NO_THROW(cross_entropy_forward(CrossEntropyArgs{.ignore_index = -1}, logits, targets, losses, lse));
  Tensor grad_losses = Tensor::zeros({5}), grad_logits = Tensor::empty({5, 13});
  expect_error_naming(
      [&] { cross_entropy_backward(CrossEntropyArgs{}, logits, targets, lse, grad_losses, grad_logits); },
      {"cross_entropy_backward", "target -1", "row 4"});
}

// A vocabulary shard's backward: with the whole row's lse, each shard's gradient (targets mapped
// to its columns; another shard's target stays out of range) is the whole gradient's columns.
TEST(CrossEntropy, VocabShardBackwardGivesTheWholeGradientsColumns) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t N = 7, V = 11, split = 4;
  const std::int32_t ignore = -100;
  Tensor logits = testing::random_tensor({N, V}, seed, 0), g = testing::random_tensor({N}, seed, 1);
  Tensor targets = testing::random_ids({N}, static_cast<std::int32_t>(V), seed, 2);
  targets.set({2}, ignore);
  const std::vector<std::int32_t> tv = ids_vector(targets);
  const std::vector<double> lv = to_f64(logits);
  const std::vector<double> whole = reference_grad(lv, tv, V, ignore, to_f64(g));
  const CrossEntropyExpected ref = reference_cross_entropy(lv, tv, V, ignore);
  Tensor lse = Tensor::empty({N});
  for (std::int64_t n = 0; n < N; ++n) lse.data<float>()[n] = static_cast<float>(ref.lse[n]);
  for (auto [begin, end] : {std::pair<std::int64_t, std::int64_t>{0, split}, {split, V}}) {
    Tensor local = Tensor::empty({N}, DType::i32);
    for (std::int64_t n = 0; n < N; ++n) {
      local.data<std::int32_t>()[n] = tv[n] == ignore ? ignore : static_cast<std::int32_t>(tv[n] - begin);
    }
    Tensor columns = logits.slice(1, begin, end).contiguous(), grad = Tensor::empty({N, end - begin});
    cross_entropy_backward(CrossEntropyArgs{.ignore_index = ignore, .vocab_shard = true}, columns, local, lse, g, grad);
    std::vector<double> expected;
    for (std::int64_t n = 0; n < N; ++n)
      for (std::int64_t v = begin; v < end; ++v) expected.push_back(whole[n * V + v]);
    testing::expect_close(grad, expected, 1e-5, 1e-5,
                          "shard [" + std::to_string(begin) + ", " + std::to_string(end) + ")");
  }
}

TEST(CrossEntropy, MismatchesNameTheOpAndShapes) {
  const CrossEntropyArgs args{};
  Tensor logits = Tensor::zeros({5, 13}), targets = Tensor::zeros({5}, DType::i32);
  Tensor losses = Tensor::empty({5}), lse = Tensor::empty({5});
  Tensor long_targets = Tensor::zeros({6}, DType::i32);
  expect_error_naming([&] { cross_entropy_forward(args, logits, long_targets, losses, lse); },
                      {"cross_entropy_forward", "targets", "[6]", "[5]"});
  Tensor float_targets = Tensor::zeros({5});
  expect_error_naming([&] { cross_entropy_forward(args, logits, float_targets, losses, lse); },
                      {"cross_entropy_forward", "targets", "f32", "i32"});
  Tensor int_logits = Tensor::zeros({5, 13}, DType::i32);
  expect_error_naming([&] { cross_entropy_forward(args, int_logits, targets, losses, lse); },
                      {"cross_entropy_forward", "logits", "i32", "[5, 13]"});
  Tensor flat_logits = Tensor::zeros({65});
  expect_error_naming([&] { cross_entropy_forward(args, flat_logits, targets, losses, lse); },
                      {"cross_entropy_forward", "logits", "[65]"});
  Tensor empty_vocab = Tensor::zeros({5, 0});
  expect_error_naming([&] { cross_entropy_forward(args, empty_vocab, targets, losses, lse); },
                      {"cross_entropy_forward", "[5, 0]", "V >= 1"});
  Tensor bad_lse = Tensor::empty({4});
  expect_error_naming([&] { cross_entropy_forward(args, logits, targets, losses, bad_lse); },
                      {"cross_entropy_forward", "lse", "[4]", "[5]"});
  Tensor grad_losses = Tensor::zeros({5}), bad_grad_logits = Tensor::empty({13, 5});
  expect_error_naming([&] { cross_entropy_backward(args, logits, targets, lse, grad_losses, bad_grad_logits); },
                      {"cross_entropy_backward", "grad_logits", "[13, 5]", "[5, 13]"});
  Tensor grad_logits = Tensor::empty({5, 13}), bad_grad_losses = Tensor::zeros({5, 1});
  expect_error_naming([&] { cross_entropy_backward(args, logits, targets, lse, bad_grad_losses, grad_logits); },
                      {"cross_entropy_backward", "grad_losses", "[5, 1]", "[5]"});
}

}  // namespace
}  // namespace myriad
