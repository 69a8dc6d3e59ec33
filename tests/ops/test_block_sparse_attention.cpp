// Block-sparse attention, offsets and attention_merge (ops/attention.h, ops/block_layout.h) against
// a naive float64 masked attention: every (query, key) pair is scored and masked by an explicit
// visibility rule written from the layout's definition (key block listed for the query's block and
// head, causal on global positions), not by the kernel's run logic. Covers each fixed pattern,
// per-head layouts, T off the block grid, grouped-query heads, the all-kept layout against dense
// attention, finite differences, a query chunk split into key chunks merged with attention_merge
// and accumulated backward (ring attention's contract), rows that see no key, and bad layouts.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>

#include "myriad/ops/attention.h"
#include "myriad/ops/block_layout.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using testing::to_f64;
using Visible = std::function<bool(std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j)>;

struct Dims {
  std::int64_t B, Hq, Hkv, Tq, Tk, D;
};

std::int64_t at(std::int64_t H, std::int64_t T, std::int64_t D, std::int64_t b, std::int64_t h, std::int64_t t) {
  return ((b * H + h) * T + t) * D;
}

// Masked float64 attention of flat row-major inputs: out, lse (-inf where a row sees nothing) and,
// with r set, the analytic gradients of L = sum(out * r).
struct Reference {
  std::vector<double> out, lse, dq, dk, dv;
};

Reference reference(const Dims& d, double scale, const Visible& visible, const std::vector<double>& q,
                    const std::vector<double>& k, const std::vector<double>& v, const std::vector<double>* r) {
  Reference ref;
  ref.out.assign(d.B * d.Hq * d.Tq * d.D, 0.0);
  ref.lse.assign(d.B * d.Hq * d.Tq, -std::numeric_limits<double>::infinity());
  ref.dq.assign(q.size(), 0.0);
  ref.dk.assign(k.size(), 0.0);
  ref.dv.assign(v.size(), 0.0);
  std::vector<double> p(d.Tk), dp(d.Tk);
  for (std::int64_t b = 0; b < d.B; ++b)
    for (std::int64_t h = 0; h < d.Hq; ++h) {
      const std::int64_t g = h / (d.Hq / d.Hkv);
      for (std::int64_t i = 0; i < d.Tq; ++i) {
        const double* qi = q.data() + at(d.Hq, d.Tq, d.D, b, h, i);
        double mx = -std::numeric_limits<double>::infinity();
        for (std::int64_t j = 0; j < d.Tk; ++j) {
          if (!visible(b, h, i, j)) continue;
          double s = 0.0;
          for (std::int64_t c = 0; c < d.D; ++c) s += qi[c] * k[at(d.Hkv, d.Tk, d.D, b, g, j) + c];
          p[j] = scale * s;
          mx = std::max(mx, p[j]);
        }
        if (!std::isfinite(mx)) continue;
        double sum = 0.0;
        for (std::int64_t j = 0; j < d.Tk; ++j)
          if (visible(b, h, i, j)) sum += std::exp(p[j] - mx);
        ref.lse[(b * d.Hq + h) * d.Tq + i] = mx + std::log(sum);
        double* oi = ref.out.data() + at(d.Hq, d.Tq, d.D, b, h, i);
        for (std::int64_t j = 0; j < d.Tk; ++j) {
          p[j] = visible(b, h, i, j) ? std::exp(p[j] - mx) / sum : 0.0;
          for (std::int64_t c = 0; c < d.D; ++c) oi[c] += p[j] * v[at(d.Hkv, d.Tk, d.D, b, g, j) + c];
        }
        if (r == nullptr) continue;
        const double* ri = r->data() + at(d.Hq, d.Tq, d.D, b, h, i);
        double delta = 0.0;
        for (std::int64_t j = 0; j < d.Tk; ++j) {
          dp[j] = 0.0;
          for (std::int64_t c = 0; c < d.D; ++c) dp[j] += ri[c] * v[at(d.Hkv, d.Tk, d.D, b, g, j) + c];
          delta += p[j] * dp[j];
        }
        for (std::int64_t j = 0; j < d.Tk; ++j) {
          if (p[j] == 0.0) continue;
          const double ds = p[j] * (dp[j] - delta) * scale;
          for (std::int64_t c = 0; c < d.D; ++c) {
            ref.dq[at(d.Hq, d.Tq, d.D, b, h, i) + c] += ds * k[at(d.Hkv, d.Tk, d.D, b, g, j) + c];
            ref.dk[at(d.Hkv, d.Tk, d.D, b, g, j) + c] += ds * qi[c];
            ref.dv[at(d.Hkv, d.Tk, d.D, b, g, j) + c] += p[j] * ri[c];
          }
        }
      }
    }
  return ref;
}

// The visibility rule of a layout, from its definition (ops/attention.h).
Visible layout_rule(const BlockLayout& layout, std::int64_t Hq, std::int64_t q_offset, std::int64_t k_offset,
                    bool causal) {
  return [&layout, Hq, q_offset, k_offset, causal](std::int64_t b, std::int64_t h, std::int64_t i, std::int64_t j) {
    const std::int64_t qpos = q_offset + i, kpos = k_offset + j;
    if (causal && kpos > qpos) return false;
    const auto row = layout.row(b * Hq + h, qpos / layout.block_size);
    return std::find(row.begin(), row.end(), static_cast<std::int32_t>(kpos / layout.block_size)) != row.end();
  };
}

struct Inputs {
  Tensor q, k, v, r;
};

Inputs random_inputs(const Dims& d, std::uint64_t seed) {
  return {testing::random_tensor({d.B, d.Hq, d.Tq, d.D}, seed, 0),
          testing::random_tensor({d.B, d.Hkv, d.Tk, d.D}, seed, 1),
          testing::random_tensor({d.B, d.Hkv, d.Tk, d.D}, seed, 2),
          testing::random_tensor({d.B, d.Hq, d.Tq, d.D}, seed, 3)};
}

struct Outputs {
  Tensor out, lse, dq, dk, dv;
};

Outputs run(const AttentionArgs& args, const Dims& d, const Inputs& in) {
  Outputs o{Tensor::empty({d.B, d.Hq, d.Tq, d.D}), Tensor::empty({d.B, d.Hq, d.Tq}),
            Tensor::empty({d.B, d.Hq, d.Tq, d.D}), Tensor::empty({d.B, d.Hkv, d.Tk, d.D}),
            Tensor::empty({d.B, d.Hkv, d.Tk, d.D})};
  attention_forward(args, in.q, in.k, in.v, o.out, o.lse);
  attention_backward(args, in.q, in.k, in.v, o.out, o.lse, in.r, o.dq, o.dk, o.dv);
  return o;
}

void expect_matches_reference(const AttentionArgs& args, const Dims& d, const Inputs& in, const Outputs& o,
                              const Visible& rule) {
  const std::vector<double> r = to_f64(in.r);
  const Reference ref = reference(d, attention_scale(args, d.D), rule, to_f64(in.q), to_f64(in.k), to_f64(in.v), &r);
  // Same bounds as the dense attention test (tests/ops/test_attention.cpp): f32 sums over <= T keys.
  testing::expect_close(o.out, ref.out, 2e-6, 2e-6, "out");
  const std::vector<double> lse = to_f64(o.lse);
  for (std::size_t n = 0; n < lse.size(); ++n) {
    if (std::isinf(ref.lse[n])) {
      EXPECT_TRUE(std::isinf(lse[n]) && lse[n] < 0) << "lse[" << n << "] = " << lse[n] << " for a row with no key";
    } else {
      EXPECT_NEAR(lse[n], ref.lse[n], 2e-6 * (1 + std::abs(ref.lse[n]))) << "lse[" << n << "]";
    }
  }
  testing::expect_close(o.dq, ref.dq, 1e-5, 1e-5, "grad_q");
  testing::expect_close(o.dk, ref.dk, 1e-5, 1e-5, "grad_k");
  testing::expect_close(o.dv, ref.dv, 1e-5, 1e-5, "grad_v");
}

struct PatternCase {
  const char* name;
  FixedBlockPattern pattern;
  std::int64_t T, block;
};

void PrintTo(const PatternCase& c, std::ostream* os) {
  *os << c.name << " local " << c.pattern.local_blocks << " global " << c.pattern.global_blocks << " stride "
      << c.pattern.stride_blocks << " T " << c.T << " block " << c.block;
}

class FixedPatterns : public ::testing::TestWithParam<PatternCase> {};

TEST_P(FixedPatterns, MatchMaskedFloat64Attention) {
  const PatternCase c = GetParam();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const Dims d{2, 4, 2, c.T, c.T, 16};
  const BlockLayout layout = fixed_block_layout(c.pattern, c.T, c.block);
  const Inputs in = random_inputs(d, seed);
  AttentionArgs args{.block_k = 24, .layout = &layout};  // pieces shorter than a run, off the block grid
  const Outputs o = run(args, d, in);
  // The shared layout seen as set 0 by every head.
  expect_matches_reference(args, d, in, o, [&](std::int64_t, std::int64_t, std::int64_t i, std::int64_t j) {
    return j <= i && in_fixed_pattern(c.pattern, i / c.block, j / c.block);
  });
}

INSTANTIATE_TEST_SUITE_P(
    Layouts, FixedPatterns,
    ::testing::Values(PatternCase{"diagonal only", {}, 128, 16},
                      PatternCase{"local window", {.local_blocks = 2}, 150, 16},
                      PatternCase{"global sinks", {.global_blocks = 2}, 128, 16},
                      PatternCase{"strided", {.stride_blocks = 3}, 160, 16},
                      PatternCase{"all three", {.local_blocks = 1, .global_blocks = 1, .stride_blocks = 4}, 200, 16},
                      PatternCase{"block of one row", {.local_blocks = 3}, 40, 1},
                      PatternCase{"block past T", {.local_blocks = 1}, 50, 64}));

TEST(BlockLayout, FixedPatternListsExactlyTheNamedBlocks) {
  const BlockLayout layout = fixed_block_layout({.local_blocks = 1, .global_blocks = 1, .stride_blocks = 3}, 64, 8);
  ASSERT_EQ(layout.query_blocks, 8);
  auto row = [&](std::int64_t qb) {
    const auto r = layout.row(0, qb);
    return std::vector<std::int32_t>(r.begin(), r.end());
  };
  EXPECT_EQ(row(0), (std::vector<std::int32_t>{0}));
  EXPECT_EQ(row(1), (std::vector<std::int32_t>{0, 1}));
  EXPECT_EQ(row(3), (std::vector<std::int32_t>{0, 2, 3}));
  EXPECT_EQ(row(7), (std::vector<std::int32_t>{0, 1, 4, 6, 7}));  // sink, strides 6 and 3 back, window, diagonal
  EXPECT_EQ(dense_causal_layout(64, 8).kept_blocks(), 8 * 9 / 2);
  EXPECT_EQ(blocks_covering(65, 8), 9);
}

// A random per-head layout (each causal block kept with probability 1/2, the diagonal always).
BlockLayout random_head_layout(std::int64_t sets, std::int64_t T, std::int64_t block, std::uint64_t seed) {
  BlockLayout layout;
  layout.block_size = block;
  layout.query_blocks = blocks_covering(T, block);
  layout.sets = sets;
  const Tensor coins = testing::random_tensor({sets, layout.query_blocks, layout.query_blocks}, seed, 9, 0.0f, 1.0f);
  const float* c = coins.data<float>();
  for (std::int64_t s = 0; s < sets; ++s)
    for (std::int64_t qb = 0; qb < layout.query_blocks; ++qb) {
      for (std::int64_t kb = 0; kb <= qb; ++kb) {
        if (kb == qb || c[(s * layout.query_blocks + qb) * layout.query_blocks + kb] < 0.5f)
          layout.key_blocks.push_back(static_cast<std::int32_t>(kb));
      }
      layout.row_begin.push_back(layout.kept_blocks());
    }
  return layout;
}

TEST(BlockSparseAttention, PerHeadLayoutsMatchMaskedFloat64) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const Dims d{2, 4, 1, 96, 96, 8};
  const BlockLayout layout = random_head_layout(d.B * d.Hq, d.Tq, 8, seed);
  const Inputs in = random_inputs(d, seed);
  const AttentionArgs args{.layout = &layout};
  const Outputs o = run(args, d, in);
  expect_matches_reference(args, d, in, o, layout_rule(layout, d.Hq, 0, 0, true));
}

TEST(BlockSparseAttention, EveryBlockKeptEqualsDenseAttention) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const Dims d{1, 4, 2, 300, 300, 32};
  const Inputs in = random_inputs(d, seed);
  const BlockLayout all = dense_causal_layout(d.Tq, 64);
  const Outputs sparse = run(AttentionArgs{.layout = &all}, d, in);
  const Outputs dense = run(AttentionArgs{}, d, in);
  // Same sums in a different blocking: float32 rounding only.
  testing::expect_close(sparse.out, to_f64(dense.out), 1e-6, 1e-6, "out");
  testing::expect_close(sparse.lse, to_f64(dense.lse), 1e-6, 1e-6, "lse");
  testing::expect_close(sparse.dq, to_f64(dense.dq), 1e-5, 1e-5, "grad_q");
  testing::expect_close(sparse.dk, to_f64(dense.dk), 1e-5, 1e-5, "grad_k");
  testing::expect_close(sparse.dv, to_f64(dense.dv), 1e-5, 1e-5, "grad_v");
}

TEST(BlockSparseAttention, GradientsMatchFiniteDifferences) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const Dims d{1, 2, 1, 24, 24, 4};
  const BlockLayout layout = fixed_block_layout({.local_blocks = 1, .stride_blocks = 2}, d.Tq, 4);
  const Inputs in = random_inputs(d, seed);
  const AttentionArgs args{.layout = &layout};
  const Outputs o = run(args, d, in);
  const Visible rule = layout_rule(layout, d.Hq, 0, 0, true);
  const std::vector<double> r = to_f64(in.r);
  const double scale = attention_scale(args, d.D);
  std::vector<double> q = to_f64(in.q), k = to_f64(in.k), v = to_f64(in.v);
  auto loss = [&] { return testing::dot(reference(d, scale, rule, q, k, v, nullptr).out, r); };
  for (const auto& entry : {std::tuple{&q, &o.dq, "q"}, std::tuple{&k, &o.dk, "k"}, std::tuple{&v, &o.dv, "v"}}) {
    std::vector<double>* x = std::get<0>(entry);  // variables, not bindings: the lambda captures x
    const Tensor* grad = std::get<1>(entry);
    const char* name = std::get<2>(entry);
    const std::vector<double> numeric = testing::numerical_gradient(
        [&, x](const std::vector<double>& at) {
          const std::vector<double> saved = *x;
          *x = at;
          const double l = loss();
          *x = saved;
          return l;
        },
        *x, 1e-4);
    testing::expect_close(*grad, numeric, 1e-4, 1e-3, name);
  }
}

// Ring attention's contract: a query chunk against key chunks one at a time (global offsets),
// merged with attention_merge and differentiated chunk by chunk with accumulate, equals the
// attention over all keys at once.
TEST(BlockSparseAttention, KeyChunksMergeAndAccumulateToTheWholeAttention) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t T = 128, chunk = 32, q0 = 64;  // query chunk [64, 96) of a 128-token sequence
  const BlockLayout layout = fixed_block_layout({.local_blocks = 1, .global_blocks = 1}, T, 16);
  for (const BlockLayout* lay : {static_cast<const BlockLayout*>(nullptr), &layout}) {
    SCOPED_TRACE(lay == nullptr ? "dense" : "block-sparse");
    const Dims whole{1, 2, 1, chunk, T, 8};
    const Inputs in = random_inputs(whole, seed);
    const AttentionArgs args{.q_offset = q0, .layout = lay};
    const Outputs expected = run(args, whole, in);
    Tensor out = Tensor::full({1, 2, chunk, 8}, 0.0f), lse = Tensor::full({1, 2, chunk}, -INFINITY);
    for (std::int64_t k0 = 0; k0 < T; k0 += chunk) {
      Tensor po = Tensor::empty({1, 2, chunk, 8}), pl = Tensor::empty({1, 2, chunk});
      const AttentionArgs pargs{.q_offset = q0, .k_offset = k0, .layout = lay};
      attention_forward(pargs, in.q, in.k.slice(2, k0, k0 + chunk), in.v.slice(2, k0, k0 + chunk), po, pl);
      attention_merge(out, lse, po, pl);
    }
    testing::expect_close(out, to_f64(expected.out), 1e-6, 1e-6, "merged out");
    testing::expect_close(lse, to_f64(expected.lse), 1e-6, 1e-6, "merged lse");
    Tensor dq = Tensor::full({1, 2, chunk, 8}, 0.0f), dk = Tensor::full({1, 1, T, 8}, 0.0f);
    Tensor dv = Tensor::full({1, 1, T, 8}, 0.0f);
    for (std::int64_t k0 = 0; k0 < T; k0 += chunk) {
      Tensor dk_part = dk.slice(2, k0, k0 + chunk), dv_part = dv.slice(2, k0, k0 + chunk);
      const AttentionArgs pargs{.q_offset = q0, .k_offset = k0, .layout = lay, .accumulate = true};
      attention_backward(pargs, in.q, in.k.slice(2, k0, k0 + chunk), in.v.slice(2, k0, k0 + chunk), out, lse, in.r, dq,
                         dk_part, dv_part);
    }
    testing::expect_close(dq, to_f64(expected.dq), 1e-5, 1e-5, "accumulated grad_q");
    testing::expect_close(dk, to_f64(expected.dk), 1e-5, 1e-5, "accumulated grad_k");
    testing::expect_close(dv, to_f64(expected.dv), 1e-5, 1e-5, "accumulated grad_v");
  }
}

TEST(BlockSparseAttention, RowsThatSeeNoKeyGetZerosAndNoGradient) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  // Keys at [32, 64) and queries at [0, 32): causal, nothing is visible.
  const Dims d{1, 2, 2, 32, 32, 8};
  const Inputs in = random_inputs(d, seed);
  const Outputs o = run(AttentionArgs{.k_offset = 32}, d, in);
  for (double x : to_f64(o.out)) ASSERT_EQ(x, 0.0);
  for (double x : to_f64(o.lse)) ASSERT_TRUE(std::isinf(x) && x < 0);
  for (const Tensor* g : {&o.dq, &o.dk, &o.dv})
    for (double x : to_f64(*g)) ASSERT_EQ(x, 0.0);
}

TEST(BlockSparseAttention, ResultsAreBitwiseIndependentOfThreadCount) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const Dims d{2, 4, 2, 256, 256, 16};
  const BlockLayout layout = random_head_layout(d.B * d.Hq, d.Tq, 32, seed);
  const Inputs in = random_inputs(d, seed);
  const int threads = omp_get_max_threads();
  omp_set_num_threads(1);
  const Outputs one = run(AttentionArgs{.layout = &layout}, d, in);
  omp_set_num_threads(std::max(2, threads));
  const Outputs many = run(AttentionArgs{.layout = &layout}, d, in);
  omp_set_num_threads(threads);
  for (auto [a, b] : {std::pair{&one.out, &many.out}, std::pair{&one.dq, &many.dq}, std::pair{&one.dk, &many.dk},
                      std::pair{&one.dv, &many.dv}}) {
    ASSERT_EQ(to_f64(*a), to_f64(*b));
  }
}

TEST(BlockSparseAttention, BadLayoutsNameTheProblem) {
  const Dims d{1, 2, 2, 64, 64, 8};
  const Inputs in = random_inputs(d, 1);
  Tensor out = Tensor::empty({1, 2, 64, 8}), lse = Tensor::empty({1, 2, 64});
  BlockLayout short_layout = fixed_block_layout({}, 32, 16);
  testing::expect_error_naming(
      [&] { attention_forward(AttentionArgs{.layout = &short_layout}, in.q, in.k, in.v, out, lse); },
      {"attention_forward", "outside the layout", "32 positions"});
  BlockLayout layout = fixed_block_layout({.local_blocks = 1}, 64, 16);
  testing::expect_error_naming(
      [&] { attention_forward(AttentionArgs{.q_offset = 8, .layout = &layout}, in.q, in.k, in.v, out, lse); },
      {"q_offset 8", "multiples of the layout's block_size 16"});
  BlockLayout unsorted = layout;
  std::swap(unsorted.key_blocks[1], unsorted.key_blocks[2]);
  testing::expect_error_naming(
      [&] { attention_forward(AttentionArgs{.layout = &unsorted}, in.q, in.k, in.v, out, lse); },
      {"attention_forward: layout", "ascend strictly"});
  BlockLayout three_sets = layout;
  three_sets.sets = 3;
  testing::expect_error_naming([&] { check_block_layout(three_sets, "model.attention"); },
                               {"model.attention", "row_begin has 5 entries"});
}

}  // namespace
}  // namespace myriad
