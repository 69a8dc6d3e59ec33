// attention against a naive float64 attention (full T x T scores, masked softmax) and its
// analytic float64 backward, for many shapes (T off the block grid, T < block, GQA, non-causal,
// strided views); the backward also against central finite differences of the float64 forward;
// argument errors; bitwise identical results with 1 and 2 OpenMP threads.
#include <gtest/gtest.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>

#include "../../src/ops/cpu/fast_exp.h"  // the attention kernels' exp, checked directly below
#include "myriad/core/precision.h"
#include "myriad/ops/attention.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using testing::to_f64;

struct AttnDims {
  std::int64_t B, Hq, Hkv, T, D;
  bool causal;
};

std::int64_t at(const AttnDims& d, std::int64_t H, std::int64_t b, std::int64_t h, std::int64_t t) {
  return ((b * H + h) * d.T + t) * d.D;
}

// Softmax probabilities (T x T, masked entries 0) and lse of head (b, h).
void reference_probs(const AttnDims& d, double scale, const std::vector<double>& q, const std::vector<double>& k,
                     std::int64_t b, std::int64_t h, std::vector<double>& probs, double* lse) {
  const std::int64_t g = h / (d.Hq / d.Hkv);
  probs.assign(d.T * d.T, 0.0);
  for (std::int64_t i = 0; i < d.T; ++i) {
    const std::int64_t visible = d.causal ? i + 1 : d.T;
    double mx = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j < visible; ++j) {
      double s = 0.0;
      for (std::int64_t c = 0; c < d.D; ++c) s += q[at(d, d.Hq, b, h, i) + c] * k[at(d, d.Hkv, b, g, j) + c];
      probs[i * d.T + j] = scale * s;
      mx = std::max(mx, scale * s);
    }
    double sum = 0.0;
    for (std::int64_t j = 0; j < visible; ++j) sum += std::exp(probs[i * d.T + j] - mx);
    for (std::int64_t j = 0; j < visible; ++j) probs[i * d.T + j] = std::exp(probs[i * d.T + j] - mx) / sum;
    if (lse != nullptr) lse[i] = mx + std::log(sum);
  }
}

// out (B, Hq, T, D) and lse (B, Hq, T) of flat row-major float64 inputs.
void reference_forward(const AttnDims& d, double scale, const std::vector<double>& q, const std::vector<double>& k,
                       const std::vector<double>& v, std::vector<double>& out, std::vector<double>* lse) {
  out.assign(d.B * d.Hq * d.T * d.D, 0.0);
  if (lse != nullptr) lse->assign(d.B * d.Hq * d.T, 0.0);
  std::vector<double> probs;
  for (std::int64_t b = 0; b < d.B; ++b)
    for (std::int64_t h = 0; h < d.Hq; ++h) {
      const std::int64_t g = h / (d.Hq / d.Hkv);
      reference_probs(d, scale, q, k, b, h, probs, lse ? lse->data() + (b * d.Hq + h) * d.T : nullptr);
      for (std::int64_t i = 0; i < d.T; ++i)
        for (std::int64_t j = 0; j < d.T; ++j)
          for (std::int64_t c = 0; c < d.D; ++c)
            out[at(d, d.Hq, b, h, i) + c] += probs[i * d.T + j] * v[at(d, d.Hkv, b, g, j) + c];
    }
}

// Analytic float64 gradients of L = sum(out * r).
void reference_backward(const AttnDims& d, double scale, const std::vector<double>& q, const std::vector<double>& k,
                        const std::vector<double>& v, const std::vector<double>& r, std::vector<double>& dq,
                        std::vector<double>& dk, std::vector<double>& dv) {
  dq.assign(q.size(), 0.0);
  dk.assign(k.size(), 0.0);
  dv.assign(v.size(), 0.0);
  std::vector<double> probs, dprobs(d.T * d.T);
  for (std::int64_t b = 0; b < d.B; ++b)
    for (std::int64_t h = 0; h < d.Hq; ++h) {
      const std::int64_t g = h / (d.Hq / d.Hkv);
      reference_probs(d, scale, q, k, b, h, probs, nullptr);
      for (std::int64_t i = 0; i < d.T; ++i) {
        double row_dot = 0.0;
        for (std::int64_t j = 0; j < d.T; ++j) {
          double dp = 0.0;
          for (std::int64_t c = 0; c < d.D; ++c) dp += r[at(d, d.Hq, b, h, i) + c] * v[at(d, d.Hkv, b, g, j) + c];
          dprobs[i * d.T + j] = dp;
          row_dot += probs[i * d.T + j] * dp;
        }
        for (std::int64_t j = 0; j < d.T; ++j) {
          const double p = probs[i * d.T + j], ds = p * (dprobs[i * d.T + j] - row_dot);
          for (std::int64_t c = 0; c < d.D; ++c) {
            dv[at(d, d.Hkv, b, g, j) + c] += p * r[at(d, d.Hq, b, h, i) + c];
            dq[at(d, d.Hq, b, h, i) + c] += scale * ds * k[at(d, d.Hkv, b, g, j) + c];
            dk[at(d, d.Hkv, b, g, j) + c] += scale * ds * q[at(d, d.Hq, b, h, i) + c];
          }
        }
      }
    }
}

// A (B, H, T, D) tensor, either contiguous or a permuted view of a (B, T, H, D) one.
Tensor make_heads(std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t D, bool permuted, std::uint64_t seed,
                  std::uint64_t stream) {
  if (!permuted) return testing::random_tensor({B, H, T, D}, seed, stream);
  return testing::random_tensor({B, T, H, D}, seed, stream).permute({0, 2, 1, 3});
}

Tensor empty_heads(std::int64_t B, std::int64_t H, std::int64_t T, std::int64_t D, bool permuted) {
  if (!permuted) return Tensor::empty({B, H, T, D});
  return Tensor::full({B, T, H, D}, NAN).permute({0, 2, 1, 3});
}

struct AttnCase {
  AttnDims dims;
  int block_q, block_k;
  bool permuted;
  float scale;  // 0: default
};

void PrintTo(const AttnCase& c, std::ostream* os) {
  *os << "B=" << c.dims.B << " Hq=" << c.dims.Hq << " Hkv=" << c.dims.Hkv << " T=" << c.dims.T << " D=" << c.dims.D
      << (c.dims.causal ? " causal" : " full") << " blocks " << c.block_q << "x" << c.block_k
      << (c.permuted ? " permuted" : "") << " scale " << c.scale;
}

void PrintTo(const AttnDims& d, std::ostream* os) {
  *os << "B=" << d.B << " Hq=" << d.Hq << " Hkv=" << d.Hkv << " T=" << d.T << " D=" << d.D
      << (d.causal ? " causal" : " full");
}

class AttentionReference : public ::testing::TestWithParam<AttnCase> {};

TEST_P(AttentionReference, ForwardAndBackwardMatchFloat64) {
  const AttnCase c = GetParam();
  const AttnDims& d = c.dims;
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Tensor q = make_heads(d.B, d.Hq, d.T, d.D, c.permuted, seed, 0);
  Tensor k = make_heads(d.B, d.Hkv, d.T, d.D, c.permuted, seed, 1);
  Tensor v = make_heads(d.B, d.Hkv, d.T, d.D, c.permuted, seed, 2);
  AttentionArgs args{.scale = c.scale, .causal = d.causal, .block_q = c.block_q, .block_k = c.block_k};
  Tensor out = empty_heads(d.B, d.Hq, d.T, d.D, c.permuted);
  Tensor lse = Tensor::empty({d.B, d.Hq, d.T});
  attention_forward(args, q, k, v, out, lse);

  const double scale = c.scale != 0.0f ? c.scale : 1.0 / std::sqrt(static_cast<double>(d.D));
  std::vector<double> qv = to_f64(q), kv = to_f64(k), vv = to_f64(v), expected_out, expected_lse;
  reference_forward(d, scale, qv, kv, vv, expected_out, &expected_lse);
  // Outputs are convex combinations of v in [-1, 1]; float32 sums over <= T keys and D terms
  // (observed worst error ~2e-7).
  testing::expect_close(out, expected_out, 2e-6, 2e-6, "attention out");
  testing::expect_close(lse, expected_lse, 2e-6, 2e-6, "attention lse");

  Tensor r = make_heads(d.B, d.Hq, d.T, d.D, c.permuted, seed, 3);
  Tensor grad_q = empty_heads(d.B, d.Hq, d.T, d.D, c.permuted);
  Tensor grad_k = empty_heads(d.B, d.Hkv, d.T, d.D, c.permuted);
  Tensor grad_v = empty_heads(d.B, d.Hkv, d.T, d.D, c.permuted);
  attention_backward(args, q, k, v, out, lse, r, grad_q, grad_k, grad_v);
  std::vector<double> dq, dk, dv;
  reference_backward(d, scale, qv, kv, vv, to_f64(r), dq, dk, dv);
  // grad_k / grad_v sum over up to T * Hq / Hkv query rows (observed worst error ~1e-6).
  testing::expect_close(grad_q, dq, 1e-5, 1e-5, "grad_q");
  testing::expect_close(grad_k, dk, 1e-5, 1e-5, "grad_k");
  testing::expect_close(grad_v, dv, 1e-5, 1e-5, "grad_v");
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, AttentionReference,
    ::testing::Values(AttnCase{{1, 1, 1, 1, 8, true}, 0, 0, false, 0.0f},         // a single position
                      AttnCase{{2, 2, 2, 20, 16, true}, 0, 0, false, 0.0f},       // T < block
                      AttnCase{{2, 2, 2, 37, 16, true}, 16, 16, false, 0.0f},     // T off the block grid
                      AttnCase{{1, 2, 2, 45, 8, true}, 16, 12, false, 0.0f},      // block_q != block_k
                      AttnCase{{1, 2, 2, 45, 8, true}, 8, 20, false, 0.7f},       // block_k > block_q, scale
                      AttnCase{{1, 2, 2, 150, 64, true}, 0, 0, false, 0.0f},      // D = 64, two 128-blocks
                      AttnCase{{1, 1, 1, 300, 16, true}, 256, 256, false, 0.0f},  // the large-T blocks
                      AttnCase{{2, 4, 2, 33, 16, true}, 16, 16, false, 0.0f},     // GQA 4:2
                      AttnCase{{1, 4, 1, 40, 8, true}, 16, 8, false, 0.0f},       // multi-query 4:1
                      AttnCase{{2, 2, 2, 37, 16, false}, 16, 16, false, 0.0f},    // non-causal
                      AttnCase{{1, 4, 2, 29, 8, false}, 8, 8, false, 0.0f},       // non-causal GQA
                      AttnCase{{2, 3, 3, 41, 16, true}, 16, 16, true, 0.0f},      // permuted (B, T, H, D)
                      AttnCase{{1, 4, 2, 70, 64, true}, 32, 64, true, 0.0f},      // permuted GQA, D = 64
                      AttnCase{{1, 2, 1, 23, 8, false}, 8, 8, true, 0.0f}));      // permuted non-causal MQA

// The backward of the blocked op against finite differences of the float64 forward itself.
class AttentionFiniteDifferences : public ::testing::TestWithParam<AttnDims> {};

TEST_P(AttentionFiniteDifferences, GradientsMatch) {
  const AttnDims d = GetParam();
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  Tensor q = testing::random_tensor({d.B, d.Hq, d.T, d.D}, seed, 0);
  Tensor k = testing::random_tensor({d.B, d.Hkv, d.T, d.D}, seed, 1);
  Tensor v = testing::random_tensor({d.B, d.Hkv, d.T, d.D}, seed, 2);
  Tensor r = testing::random_tensor({d.B, d.Hq, d.T, d.D}, seed, 3);
  AttentionArgs args{.causal = d.causal, .block_q = 3, .block_k = 2};
  Tensor out = Tensor::empty(q.shape()), lse = Tensor::empty({d.B, d.Hq, d.T});
  attention_forward(args, q, k, v, out, lse);
  Tensor grad_q = Tensor::empty(q.shape()), grad_k = Tensor::empty(k.shape()), grad_v = Tensor::empty(v.shape());
  attention_backward(args, q, k, v, out, lse, r, grad_q, grad_k, grad_v);

  const double scale = 1.0 / std::sqrt(static_cast<double>(d.D));
  std::vector<double> qv = to_f64(q), kv = to_f64(k), vv = to_f64(v), rv = to_f64(r);
  auto loss = [&](const std::vector<double>& qx, const std::vector<double>& kx, const std::vector<double>& vx) {
    std::vector<double> o;
    reference_forward(d, scale, qx, kx, vx, o, nullptr);
    return testing::dot(o, rv);
  };
  auto fd_q = testing::numerical_gradient([&](const std::vector<double>& x) { return loss(x, kv, vv); }, qv);
  auto fd_k = testing::numerical_gradient([&](const std::vector<double>& x) { return loss(qv, x, vv); }, kv);
  auto fd_v = testing::numerical_gradient([&](const std::vector<double>& x) { return loss(qv, kv, x); }, vv);
  testing::expect_close(grad_q, fd_q, 1e-5, 1e-5, "grad_q vs finite differences");
  testing::expect_close(grad_k, fd_k, 1e-5, 1e-5, "grad_k vs finite differences");
  testing::expect_close(grad_v, fd_v, 1e-5, 1e-5, "grad_v vs finite differences");
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionFiniteDifferences,
                         ::testing::Values(AttnDims{1, 2, 2, 7, 4, true}, AttnDims{2, 2, 1, 5, 3, true},
                                           AttnDims{1, 4, 2, 6, 2, false}, AttnDims{1, 1, 1, 1, 5, true}));

TEST(Attention, UndefinedGradientsAreSkippedAndTheRestUnchanged) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t B = 1, Hq = 4, Hkv = 2, T = 50, D = 16;
  Tensor q = testing::random_tensor({B, Hq, T, D}, seed, 0), k = testing::random_tensor({B, Hkv, T, D}, seed, 1);
  Tensor v = testing::random_tensor({B, Hkv, T, D}, seed, 2), r = testing::random_tensor({B, Hq, T, D}, seed, 3);
  AttentionArgs args{.block_q = 16, .block_k = 16};
  Tensor out = Tensor::empty(q.shape()), lse = Tensor::empty({B, Hq, T});
  attention_forward(args, q, k, v, out, lse);
  Tensor gq = Tensor::empty(q.shape()), gk = Tensor::empty(k.shape()), gv = Tensor::empty(v.shape());
  attention_backward(args, q, k, v, out, lse, r, gq, gk, gv);
  Tensor none;
  for (int which = 0; which < 3; ++which) {
    Tensor only = Tensor::full(which == 0 ? q.shape() : k.shape(), 5.0);
    Tensor& a = which == 0 ? only : none;
    Tensor& b = which == 1 ? only : none;
    Tensor& c = which == 2 ? only : none;
    attention_backward(args, q, k, v, out, lse, r, a, b, c);
    const Tensor& full = which == 0 ? gq : (which == 1 ? gk : gv);
    testing::expect_close(only, to_f64(full), 0, 0, "gradient computed alone, index " + std::to_string(which));
  }
}

TEST(Attention, ResultsAreBitwiseIndependentOfThreadCount) {
  std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t B = 2, Hq = 4, Hkv = 2, T = 200, D = 32;
  Tensor q = testing::random_tensor({B, Hq, T, D}, seed, 0), k = testing::random_tensor({B, Hkv, T, D}, seed, 1);
  Tensor v = testing::random_tensor({B, Hkv, T, D}, seed, 2), r = testing::random_tensor({B, Hq, T, D}, seed, 3);
  AttentionArgs args{.block_q = 64, .block_k = 32};
  std::vector<Tensor> results[2];
  testing::ThreadCountGuard restore_threads;
  for (int threads = 1; threads <= 2; ++threads) {
    omp_set_num_threads(threads);
    Tensor out = Tensor::empty(q.shape()), lse = Tensor::empty({B, Hq, T});
    attention_forward(args, q, k, v, out, lse);
    Tensor gq = Tensor::empty(q.shape()), gk = Tensor::empty(k.shape()), gv = Tensor::empty(v.shape());
    attention_backward(args, q, k, v, out, lse, r, gq, gk, gv);
    results[threads - 1] = {out, lse, gq, gk, gv};
  }
  const char* names[] = {"out", "lse", "grad_q", "grad_k", "grad_v"};
  for (int i = 0; i < 5; ++i) {
    const Tensor& one = results[0][i];
    const Tensor& two = results[1][i];
    EXPECT_EQ(std::memcmp(one.data<float>(), two.data<float>(), one.nbytes()), 0)
        << names[i] << " differs between 1 and 2 threads";
  }
}

TEST(FastExp, RelativeErrorAndLimits) {
  // Dense sweep of the range the kernels use (x <= 0 after subtracting the row max) and beyond.
  double worst = 0.0;
  for (int i = 0; i <= 2000000; ++i) {
    const float x = -87.0f + 175.0f * static_cast<float>(i) / 2000000.0f;
    const double exact = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::fabs(cpu::fast_exp(x) - exact) / exact);
  }
  EXPECT_LT(worst, 3e-7) << "worst relative error of fast_exp on [-87, 88]";
  EXPECT_EQ(cpu::fast_exp(0.0f), 1.0f);
  EXPECT_EQ(cpu::fast_exp(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_EQ(cpu::fast_exp(-100.0f), 0.0f);
  EXPECT_TRUE(std::isfinite(cpu::fast_exp(1000.0f)));
  EXPECT_TRUE(std::isnan(cpu::fast_exp(std::numeric_limits<float>::quiet_NaN())));
}

// 16-bit products (AttentionArgs::operands): the float64 reference over the inputs rounded to the
// format, and every result a value of the format within about one of its ulps of it (the f32
// result rounds to a neighbour; the backward also reads the rounded out). GQA, permuted views.
TEST(Attention, SixteenBitProductsMatchFloat64OnRoundedInputs) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const AttnDims d{2, 4, 2, 19, 8, true};
  for (const DType format : {DType::bf16, DType::f16}) {
    SCOPED_TRACE(dtype_name(format));
    const auto rounded = [&](const Tensor& t) {
      Tensor copy = t.clone();
      round_to_precision(copy, format);
      return to_f64(copy);
    };
    const auto representable = [&](const Tensor& t) {
      Tensor copy = t.clone(), again = t.clone();
      round_to_precision(again, format);
      return std::memcmp(copy.raw_data(), again.raw_data(), copy.nbytes()) == 0;
    };
    Tensor q = make_heads(d.B, d.Hq, d.T, d.D, true, seed, 20), k = make_heads(d.B, d.Hkv, d.T, d.D, true, seed, 21);
    Tensor v = make_heads(d.B, d.Hkv, d.T, d.D, true, seed, 22);
    const AttentionArgs args{.operands = format};
    Tensor out = empty_heads(d.B, d.Hq, d.T, d.D, true), lse = Tensor::empty({d.B, d.Hq, d.T});
    attention_forward(args, q, k, v, out, lse);
    const double scale = 1.0 / std::sqrt(static_cast<double>(d.D));
    std::vector<double> expected_out, expected_lse, dq, dk, dv;
    const std::vector<double> qr = rounded(q), kr = rounded(k), vr = rounded(v);
    reference_forward(d, scale, qr, kr, vr, expected_out, &expected_lse);
    const double ulp = format == DType::bf16 ? 1.0 / 128 : 1.0 / 1024;  // relative spacing at the top of a binade
    testing::expect_close(out, expected_out, ulp, 1e-6, "out");
    testing::expect_close(lse, expected_lse, 2e-6, 2e-6, "lse (f32)");
    EXPECT_TRUE(representable(out.contiguous()));
    Tensor r = make_heads(d.B, d.Hq, d.T, d.D, true, seed, 23);
    Tensor grad_q = empty_heads(d.B, d.Hq, d.T, d.D, true), grad_k = empty_heads(d.B, d.Hkv, d.T, d.D, true);
    Tensor grad_v = empty_heads(d.B, d.Hkv, d.T, d.D, true);
    attention_backward(args, q, k, v, out, lse, r, grad_q, grad_k, grad_v);
    reference_backward(d, scale, qr, kr, vr, rounded(r), dq, dk, dv);
    // The rounded out moves each row's sum(dO * O) by ~ulp; the gradients are sums of O(T) terms.
    testing::expect_close(grad_q, dq, 4 * ulp, 4 * ulp, "grad_q");
    testing::expect_close(grad_k, dk, 4 * ulp, 4 * ulp, "grad_k");
    testing::expect_close(grad_v, dv, 2 * ulp, 2 * ulp, "grad_v");
    for (const Tensor* g : {&grad_q, &grad_k, &grad_v}) EXPECT_TRUE(representable(g->contiguous()));
  }
  Tensor q = Tensor::zeros({1, 2, 8, 4}), out = Tensor::zeros({1, 2, 8, 4}), lse = Tensor::zeros({1, 2, 8});
  Tensor grad = Tensor::zeros({1, 2, 8, 4}), none;
  testing::expect_error_naming(
      [&] {
        attention_backward({.accumulate = true, .operands = DType::bf16}, q, q, q, out, lse, grad, grad, none, none);
      },
      {"attention_backward", "accumulate", "bf16"});
  testing::expect_error_naming([&] { attention_forward({.operands = DType::i32}, q, q, q, out, lse); },
                               {"attention_forward", "operands", "i32"});
}

TEST(Attention, BadArgumentsNameTheOpAndShapes) {
  AttentionArgs args;
  Tensor q = Tensor::zeros({1, 3, 8, 4}), k2 = Tensor::zeros({1, 2, 8, 4}), out = Tensor::zeros({1, 3, 8, 4});
  Tensor lse = Tensor::zeros({1, 3, 8});
  testing::expect_error_naming([&] { attention_forward(args, q, k2, k2, out, lse); },
                               {"attention_forward", "Hq=3", "Hkv=2", "[1, 3, 8, 4]", "[1, 2, 8, 4]"});

  Tensor k = Tensor::zeros({1, 1, 8, 4}), v_short = Tensor::zeros({1, 1, 7, 4});
  testing::expect_error_naming([&] { attention_forward(args, q, k, v_short, out, lse); },
                               {"attention_forward", "'v'", "[1, 1, 7, 4]", "[1, 1, 8, 4]"});
  Tensor k_wrong_d = Tensor::zeros({1, 1, 8, 5});
  testing::expect_error_naming([&] { attention_forward(args, q, k_wrong_d, k_wrong_d, out, lse); },
                               {"attention_forward", "'k'", "[1, 1, 8, 5]", "[1, 3, 8, 4]"});
  Tensor bad_lse = Tensor::zeros({1, 3, 7});
  testing::expect_error_naming([&] { attention_forward(args, q, k, k, out, bad_lse); },
                               {"attention_forward", "'lse'", "[1, 3, 7]", "[1, 3, 8]"});

  // D with stride 2 (every other element of a wider tensor).
  Tensor wide = Tensor::zeros({1, 3, 8, 8});
  Tensor q_strided = Tensor::from_storage(wide.storage(), {1, 3, 8, 4}, {192, 64, 8, 2}, 0, DType::f32);
  testing::expect_error_naming([&] { attention_forward(args, q_strided, k, k, out, lse); },
                               {"attention_forward", "'q'", "unit stride", "[1, 3, 8, 4]", "[192, 64, 8, 2]"});

  Tensor q_int = Tensor::zeros({1, 3, 8, 4}, DType::i32);
  testing::expect_error_naming([&] { attention_forward(args, q_int, k, k, out, lse); },
                               {"attention_forward", "'q'", "i32"});

  Tensor grad_k_bad = Tensor::zeros({1, 2, 8, 4}), none;
  testing::expect_error_naming([&] { attention_backward(args, q, k, k, out, lse, out, none, grad_k_bad, none); },
                               {"attention_backward", "'grad_k'", "[1, 2, 8, 4]", "[1, 1, 8, 4]"});
  AttentionArgs negative_block{.block_q = -1};
  testing::expect_error_naming([&] { attention_forward(negative_block, q, k, k, out, lse); },
                               {"attention_forward", "block_q=-1"});
}

}  // namespace
}  // namespace myriad
