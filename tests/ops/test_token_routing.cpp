// Token routing (gather_rows, combine_rows_forward / backward) against naive float64 code on fresh
// random routing maps (K = 1..8, unused -1 slots, padding rows no token names); gradients against
// central finite differences of that code, gather's gradient as combine over the inverse map,
// results independent of the thread count, and the errors for out-of-range and repeated indices.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "myriad/ops/token_routing.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using testing::expect_error_naming;
using testing::to_f64;

// A random routing of N tokens with K choices each onto R rows: `assigned` of the N * K slot
// positions name distinct rows (the rest -1), and source[r] is the token whose slot names row r
// (-1 for rows no slot names: padding).
struct Routing {
  std::int64_t tokens = 0, k = 0, rows = 0;
  std::vector<std::int32_t> slot, source;
};

Routing random_routing(std::int64_t tokens, std::int64_t k, std::int64_t rows, std::int64_t assigned,
                       std::uint64_t seed) {
  std::mt19937_64 rng(seed);
  Routing routing{tokens, k, rows, std::vector<std::int32_t>(tokens * k, -1), std::vector<std::int32_t>(rows, -1)};
  std::vector<std::int64_t> positions(tokens * k), row_ids(rows);
  std::iota(positions.begin(), positions.end(), 0);
  std::iota(row_ids.begin(), row_ids.end(), 0);
  std::shuffle(positions.begin(), positions.end(), rng);
  std::shuffle(row_ids.begin(), row_ids.end(), rng);
  for (std::int64_t i = 0; i < assigned; ++i) {
    routing.slot[positions[i]] = static_cast<std::int32_t>(row_ids[i]);
    routing.source[row_ids[i]] = static_cast<std::int32_t>(positions[i] / k);
  }
  return routing;
}

Tensor i32_tensor(const std::vector<std::int32_t>& values, const Shape& shape) {
  Tensor t = Tensor::empty(shape, DType::i32);
  if (!values.empty()) std::memcpy(t.raw_data(), values.data(), values.size() * sizeof(std::int32_t));
  return t;
}

// out[r, :] = x[source[r], :] (zeros for -1).
std::vector<double> reference_gather(const std::vector<double>& x, const std::vector<std::int32_t>& source,
                                     std::int64_t channels) {
  std::vector<double> out(source.size() * channels, 0.0);
  for (std::size_t r = 0; r < source.size(); ++r)
    if (source[r] >= 0)
      for (std::int64_t c = 0; c < channels; ++c) out[r * channels + c] = x[source[r] * channels + c];
  return out;
}

// out[t, :] = sum_j weight[t, j] * rows[slot[t, j], :] over slots >= 0 (empty weight: ones).
std::vector<double> reference_combine(const std::vector<double>& rows, const Routing& routing,
                                      const std::vector<double>& weight, std::int64_t channels) {
  std::vector<double> out(routing.tokens * channels, 0.0);
  for (std::int64_t t = 0; t < routing.tokens; ++t)
    for (std::int64_t j = 0; j < routing.k; ++j) {
      const std::int32_t s = routing.slot[t * routing.k + j];
      if (s < 0) continue;
      const double w = weight.empty() ? 1.0 : weight[t * routing.k + j];
      for (std::int64_t c = 0; c < channels; ++c) out[t * channels + c] += w * rows[s * channels + c];
    }
  return out;
}

struct RoutingCase {
  std::int64_t tokens, k, rows, assigned, channels;
};

void PrintTo(const RoutingCase& c, std::ostream* os) {
  *os << "N=" << c.tokens << " K=" << c.k << " R=" << c.rows << " assigned=" << c.assigned << " C=" << c.channels;
}

class TokenRoutingReference : public ::testing::TestWithParam<RoutingCase> {};

TEST_P(TokenRoutingReference, GatherMatchesFloat64AndItsGradientIsCombineOverTheInverseMap) {
  const RoutingCase c = GetParam();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const Routing routing = random_routing(c.tokens, c.k, c.rows, c.assigned, seed);
  Tensor x = testing::random_tensor({c.tokens, c.channels}, seed, 1);
  Tensor source = i32_tensor(routing.source, {c.rows}), slot = i32_tensor(routing.slot, {c.tokens, c.k});
  Tensor out = Tensor::full({c.rows, c.channels}, 7.0);
  gather_rows(x, source, out);
  testing::expect_close(out, reference_gather(to_f64(x), routing.source, c.channels), 0, 0, "gather_rows");

  // L = sum(out * g): d L / d x by finite differences equals combine_rows_forward(g, slot, {}).
  Tensor g = testing::random_tensor({c.rows, c.channels}, seed, 2);
  const std::vector<double> gv = to_f64(g);
  auto loss = [&](const std::vector<double>& xv) {
    return testing::dot(reference_gather(xv, routing.source, c.channels), gv);
  };
  Tensor grad_x = Tensor::full({c.tokens, c.channels}, 7.0);
  combine_rows_forward(g, slot, Tensor(), grad_x);
  testing::expect_close(grad_x, testing::numerical_gradient(loss, to_f64(x)), 1e-6, 1e-6, "gather gradient");
}

TEST_P(TokenRoutingReference, CombineForwardAndBackwardMatchFloat64) {
  const RoutingCase c = GetParam();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const Routing routing = random_routing(c.tokens, c.k, c.rows, c.assigned, seed);
  Tensor slot = i32_tensor(routing.slot, {c.tokens, c.k});
  Tensor rows = testing::random_tensor({c.rows, c.channels}, seed, 1);
  Tensor weight = testing::random_tensor({c.tokens, c.k}, seed, 2, 0.0f, 1.0f);
  const std::vector<double> rv = to_f64(rows), wv = to_f64(weight);
  Tensor out = Tensor::full({c.tokens, c.channels}, 7.0);
  combine_rows_forward(rows, slot, weight, out);
  testing::expect_close(out, reference_combine(rv, routing, wv, c.channels), 1e-6, 1e-6, "combine");
  Tensor unweighted = Tensor::full({c.tokens, c.channels}, 7.0);
  combine_rows_forward(rows, slot, Tensor(), unweighted);
  testing::expect_close(unweighted, reference_combine(rv, routing, {}, c.channels), 1e-6, 1e-6, "combine, weight 1");

  // L = sum(out * g), by finite differences of the float64 combine in rows and in weight.
  Tensor g = testing::random_tensor({c.tokens, c.channels}, seed, 3);
  const std::vector<double> gv = to_f64(g);
  auto loss_rows = [&](const std::vector<double>& v) {
    return testing::dot(reference_combine(v, routing, wv, c.channels), gv);
  };
  auto loss_weight = [&](const std::vector<double>& v) {
    return testing::dot(reference_combine(rv, routing, v, c.channels), gv);
  };
  Tensor grad_rows = Tensor::full({c.rows, c.channels}, 7.0), grad_weight = Tensor::full({c.tokens, c.k}, 7.0);
  combine_rows_backward(rows, slot, weight, g, grad_rows, grad_weight);
  testing::expect_close(grad_rows, testing::numerical_gradient(loss_rows, rv), 1e-6, 1e-6, "grad_rows");
  // Unused slots get 0 (the finite difference of a weight that multiplies nothing).
  testing::expect_close(grad_weight, testing::numerical_gradient(loss_weight, wv), 1e-5, 1e-5, "grad_weight");

  // Written, not accumulated: a second call gives the same values; skipping grad_weight (rows
  // then unused and may be undefined) leaves grad_rows as it was; weight undefined means ones.
  const std::vector<double> first_rows = to_f64(grad_rows), first_weight = to_f64(grad_weight);
  combine_rows_backward(rows, slot, weight, g, grad_rows, grad_weight);
  testing::expect_close(grad_rows, first_rows, 0, 0, "grad_rows written twice");
  testing::expect_close(grad_weight, first_weight, 0, 0, "grad_weight written twice");
  Tensor skipped, rows_only = Tensor::full({c.rows, c.channels}, 7.0);
  combine_rows_backward(Tensor(), slot, weight, g, rows_only, skipped);
  testing::expect_close(rows_only, first_rows, 0, 0, "grad_rows without grad_weight");
  auto loss_unweighted = [&](const std::vector<double>& v) {
    return testing::dot(reference_combine(v, routing, {}, c.channels), gv);
  };
  combine_rows_backward(rows, slot, Tensor(), g, grad_rows, grad_weight);
  testing::expect_close(grad_rows, testing::numerical_gradient(loss_unweighted, rv), 1e-6, 1e-6, "grad_rows, weight 1");
  testing::expect_close(grad_weight, testing::numerical_gradient(loss_weight, wv), 1e-5, 1e-5,
                        "grad_weight with weight undefined");
}

// K = 1 .. 8; every slot used, a few unused, most unused; padding rows; empty token sets.
INSTANTIATE_TEST_SUITE_P(Shapes, TokenRoutingReference,
                         ::testing::Values(RoutingCase{5, 1, 5, 5, 3}, RoutingCase{6, 2, 14, 9, 4},
                                           RoutingCase{4, 3, 12, 12, 5}, RoutingCase{7, 4, 30, 20, 6},
                                           RoutingCase{3, 8, 26, 24, 2}, RoutingCase{9, 8, 10, 4, 3},
                                           RoutingCase{2, 5, 4, 0, 3}, RoutingCase{0, 2, 3, 0, 4},
                                           RoutingCase{4, 2, 0, 0, 3}));

TEST(TokenRouting, LargeRoutingIsThreadCountIndependent) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t N = 512, K = 4, R = 2300, C = 96;
  const Routing routing = random_routing(N, K, R, 1900, seed);
  Tensor slot = i32_tensor(routing.slot, {N, K}), source = i32_tensor(routing.source, {R});
  Tensor x = testing::random_tensor({N, C}, seed, 1), rows = testing::random_tensor({R, C}, seed, 2);
  Tensor weight = testing::random_tensor({N, K}, seed, 3), g = testing::random_tensor({N, C}, seed, 4);
  testing::ThreadCountGuard guard;
  std::vector<Tensor> first;
  for (int threads : {1, 2, 3}) {
    SCOPED_TRACE("threads " + std::to_string(threads));
    omp_set_num_threads(threads);
    Tensor gathered = Tensor::empty({R, C}), combined = Tensor::empty({N, C});
    Tensor grad_rows = Tensor::empty({R, C}), grad_weight = Tensor::empty({N, K});
    gather_rows(x, source, gathered);
    combine_rows_forward(rows, slot, weight, combined);
    combine_rows_backward(rows, slot, weight, g, grad_rows, grad_weight);
    const std::vector<Tensor> results = {gathered, combined, grad_rows, grad_weight};
    if (first.empty()) {
      first = results;
      testing::expect_close(combined, reference_combine(to_f64(rows), routing, to_f64(weight), C), 1e-5, 1e-5,
                            "large combine");
      continue;
    }
    for (std::size_t i = 0; i < results.size(); ++i) {
      EXPECT_EQ(std::memcmp(first[i].raw_data(), results[i].raw_data(), first[i].nbytes()), 0)
          << "result " << i << " differs bitwise from the 1-thread result";
    }
  }
}

TEST(TokenRouting, OutOfRangeAndRepeatedIndicesNameTheOpIndexAndPosition) {
  Tensor x = Tensor::zeros({6, 3}), out = Tensor::full({4, 3}, 7.0);
  Tensor source = i32_tensor({0, 5, 6, -1}, {4});
  expect_error_naming([&] { gather_rows(x, source, out); },
                      {"gather_rows", "source index 6", "position 2", "[-1, N) with N = 6"});
  source = i32_tensor({0, -2, 1, 1}, {4});
  expect_error_naming([&] { gather_rows(x, source, out); }, {"gather_rows", "source index -2", "position 1"});
  testing::expect_close(out, std::vector<double>(12, 7.0), 0, 0, "gather out untouched after a bad index");

  Tensor rows = Tensor::zeros({5, 3}), combined = Tensor::full({3, 3}, 7.0), weight = Tensor::zeros({3, 2});
  Tensor slot = i32_tensor({0, 1, -1, 5, 2, 3}, {3, 2});
  expect_error_naming([&] { combine_rows_forward(rows, slot, weight, combined); },
                      {"combine_rows_forward", "row index 5", "[1, 1]", "[-1, R) with R = 5"});
  slot = i32_tensor({0, 3, -1, 4, 2, 3}, {3, 2});
  expect_error_naming([&] { combine_rows_forward(rows, slot, weight, combined); },
                      {"combine_rows_forward", "row index 3", "twice", "[0, 1]", "[2, 1]"});
  testing::expect_close(combined, std::vector<double>(9, 7.0), 0, 0, "combine out untouched after a bad slot");
  Tensor g = Tensor::zeros({3, 3}), grad_rows = Tensor::full({5, 3}, 7.0), grad_weight = Tensor::full({3, 2}, 7.0);
  expect_error_naming([&] { combine_rows_backward(rows, slot, weight, g, grad_rows, grad_weight); },
                      {"combine_rows_backward", "row index 3", "twice", "[0, 1]", "[2, 1]"});
  slot = i32_tensor({0, -3, -1, 4, 2, 1}, {3, 2});
  expect_error_naming([&] { combine_rows_backward(rows, slot, weight, g, grad_rows, grad_weight); },
                      {"combine_rows_backward", "row index -3", "[0, 1]"});
  testing::expect_close(grad_rows, std::vector<double>(15, 7.0), 0, 0, "grad_rows untouched after a bad slot");
  testing::expect_close(grad_weight, std::vector<double>(6, 7.0), 0, 0, "grad_weight untouched after a bad slot");
}

TEST(TokenRouting, MismatchesNameTheOpAndArgument) {
  Tensor x = Tensor::zeros({6, 3}), out = Tensor::zeros({4, 2});
  Tensor source = Tensor::zeros({4}, DType::i32);
  expect_error_naming([&] { gather_rows(x, source, out); }, {"gather_rows", "'out'", "[4, 2]", "[4, 3]"});
  Tensor float_source = Tensor::zeros({4}), good_out = Tensor::zeros({4, 3});
  expect_error_naming([&] { gather_rows(x, float_source, good_out); }, {"gather_rows", "'source'", "f32", "i32"});
  Tensor rows = Tensor::zeros({5, 3}), slot = Tensor::zeros({3, 2}, DType::i32), weight = Tensor::zeros({3, 3});
  Tensor combined = Tensor::zeros({3, 3});
  expect_error_naming([&] { combine_rows_forward(rows, slot, weight, combined); },
                      {"combine_rows_forward", "'weight'", "[3, 3]", "[3, 2]"});
  Tensor strided_rows = Tensor::zeros({3, 5}).transpose(0, 1);
  expect_error_naming([&] { combine_rows_forward(strided_rows, slot, Tensor(), combined); },
                      {"combine_rows_forward", "'rows'", "contiguous"});
  Tensor g = Tensor::zeros({3, 3}), grad_rows = Tensor::zeros({5, 3}), grad_weight = Tensor::zeros({3, 2});
  expect_error_naming([&] { combine_rows_backward(Tensor(), slot, Tensor(), g, grad_rows, grad_weight); },
                      {"combine_rows_backward", "'rows'", "undefined"});
}

}  // namespace
}  // namespace myriad
