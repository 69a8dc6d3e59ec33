// Weight-only INT8 against float64: quantisation (per row and per group, a last group shorter
// than the others, all-zero groups) follows the definition element by element and stays within
// half a scale of the weight; dequantisation is q * scale; the linear layer equals float64 on the
// dequantised weight (more rows than one dequantisation block, with and without bias, a batched
// x); the embedding lookup equals float64 q * scale of each looked-up row (repeated ids, per row
// and per group) and refuses an id outside the table naming it; argument errors name the op and
// the tensor.
#include <gtest/gtest.h>

#include <cmath>

#include "myriad/ops/int8_linear.h"
#include "reference.h"
#include "test_helpers.h"

namespace myriad {
namespace {

using namespace testing;

struct Quantized {
  Tensor q, scales;
};

Quantized quantize(const Tensor& w, std::int64_t group) {
  Quantized out{Tensor::empty(w.shape(), DType::i8), Tensor::empty({w.size(0), int8_groups(w.size(1), group)})};
  quantize_int8(Int8Args{.group_size = group}, w, out.q, out.scales);
  return out;
}

TEST(Int8Quantize, FollowsTheDefinitionPerRowAndPerGroup) {
  const std::uint64_t seed = fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t N = 7, K = 70;
  Tensor w = random_tensor({N, K}, seed, 0, -2.0f, 2.0f);
  float* wd = w.data<float>();
  for (std::int64_t k = 0; k < K; ++k) wd[3 * K + k] = 0.0f;  // an all-zero row
  for (std::int64_t group : {0, 32, 16, 70, 128}) {
    SCOPED_TRACE("group_size " + std::to_string(group));
    const Quantized qz = quantize(w, group);
    const std::int64_t G = int8_groups(K, group), width = group == 0 ? K : group;
    ASSERT_EQ(qz.scales.size(1), G);
    for (std::int64_t n = 0; n < N; ++n) {
      for (std::int64_t g = 0; g < G; ++g) {
        double amax = 0.0;
        for (std::int64_t k = g * width; k < std::min(K, (g + 1) * width); ++k) {
          amax = std::max(amax, std::abs(static_cast<double>(wd[n * K + k])));
        }
        const float scale = qz.scales.data<float>()[n * G + g];
        ASSERT_EQ(scale, static_cast<float>(amax) / 127.0f) << "row " << n << " group " << g;
        for (std::int64_t k = g * width; k < std::min(K, (g + 1) * width); ++k) {
          // NOLINTNEXTLINE(bugprone-signed-char-misuse): int8 weights are numbers in [-127, 127]
          const int q = qz.q.data<std::int8_t>()[n * K + k];
          ASSERT_LE(std::abs(q), 127);
          const double expected = scale == 0.0f ? 0.0 : std::round(static_cast<double>(wd[n * K + k]) / scale);
          ASSERT_NEAR(q, expected, 1.0) << "row " << n << " col "
                                        << k;  // float division may land on the other side of .5
          ASSERT_LE(std::abs(q * static_cast<double>(scale) - wd[n * K + k]), 0.5 * scale * (1 + 1e-5) + 1e-30);
          if (n == 3) ASSERT_EQ(q, 0);
        }
      }
    }
    Tensor back = Tensor::empty({N, K});
    dequantize_int8(Int8Args{.group_size = group}, qz.q, qz.scales, back);
    for (std::int64_t i = 0; i < N * K; ++i) {
      const std::int64_t n = i / K, g = group == 0 ? 0 : (i % K) / group;
      ASSERT_EQ(back.data<float>()[i],
                static_cast<float>(qz.q.data<std::int8_t>()[i]) * qz.scales.data<float>()[n * G + g]);
    }
  }
}

TEST(Int8Linear, MatchesFloat64OnTheDequantisedWeight) {
  const std::uint64_t seed = fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t B = 3, T = 5, K = 96, N = 300;  // N spans three dequantisation blocks
  const Tensor x = random_tensor({B, T, K}, seed, 0), w = random_tensor({N, K}, seed, 1),
               b = random_tensor({N}, seed, 2);
  for (std::int64_t group : {0, 32, 40}) {
    const Quantized qz = quantize(w, group);
    Tensor deq = Tensor::empty({N, K});
    dequantize_int8(Int8Args{.group_size = group}, qz.q, qz.scales, deq);
    const std::vector<double> vx = to_f64(x), vw = to_f64(deq), vb = to_f64(b);
    for (bool with_bias : {false, true}) {
      SCOPED_TRACE("group " + std::to_string(group) + (with_bias ? " bias" : ""));
      std::vector<double> expected;
      for (std::int64_t r = 0; r < B * T; ++r) {
        for (std::int64_t n = 0; n < N; ++n) {
          double sum = with_bias ? vb[n] : 0.0;
          for (std::int64_t k = 0; k < K; ++k) sum += vx[r * K + k] * vw[n * K + k];
          expected.push_back(sum);
        }
      }
      Tensor y = Tensor::empty({B, T, N});
      int8_linear_forward(Int8Args{.group_size = group}, x, qz.q, qz.scales, with_bias ? b : Tensor(), y);
      expect_close(y, expected, 1e-5, 1e-5, "y");
    }
  }
}

TEST(Int8Embedding, MatchesFloat64RowsOfTheDequantisedTable) {
  const std::uint64_t seed = fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::int64_t V = 37, C = 70, B = 3, T = 11;
  const Tensor table = random_tensor({V, C}, seed, 0, -3.0f, 3.0f);
  Tensor ids = random_ids({B, T}, static_cast<std::int32_t>(V), seed, 1);
  ids.data<std::int32_t>()[1] = ids.data<std::int32_t>()[0];  // a repeated id
  ids.data<std::int32_t>()[2] = static_cast<std::int32_t>(V - 1);
  for (std::int64_t group : {0, 16, 32, 70}) {
    SCOPED_TRACE("group_size " + std::to_string(group));
    const Quantized qz = quantize(table, group);
    const std::int64_t G = int8_groups(C, group);
    std::vector<double> expected;
    for (std::int64_t i = 0; i < B * T; ++i) {
      const std::int64_t row = ids.data<std::int32_t>()[i];
      for (std::int64_t c = 0; c < C; ++c) {
        // q * scale is exact in float64 (8 + 24 significant bits); the op's f32 product is that
        // value correctly rounded to f32.
        const double product = static_cast<double>(qz.q.data<std::int8_t>()[row * C + c]) *
                               static_cast<double>(qz.scales.data<float>()[row * G + (group == 0 ? 0 : c / group)]);
        expected.push_back(static_cast<float>(product));
      }
    }
    Tensor out = Tensor::empty({B, T, C});
    int8_embedding_forward(Int8Args{.group_size = group}, ids, qz.q, qz.scales, out);
    expect_close(out, expected, 0.0, 0.0, "out");
  }
  const Quantized qz = quantize(table, 0);
  Tensor bad = Tensor::zeros({2}, DType::i32), out = Tensor::zeros({2, C}), wide = Tensor::zeros({2, C + 1});
  bad.data<std::int32_t>()[1] = static_cast<std::int32_t>(V);
  expect_error_naming([&] { int8_embedding_forward(Int8Args{}, bad, qz.q, qz.scales, out); },
                      {"int8_embedding_forward", "ids[1] = 37"});
  expect_error_naming([&] { int8_embedding_forward(Int8Args{}, bad, qz.q, qz.scales, wide); },
                      {"int8_embedding_forward", "'out'"});
}

TEST(Int8Linear, ArgumentErrorsNameOpAndTensor) {
  Tensor x = Tensor::zeros({4, 8}), q = Tensor::zeros({3, 8}, DType::i8), s = Tensor::zeros({3, 1});
  Tensor y = Tensor::zeros({4, 3});
  expect_error_naming(
      [&] {
        int8_linear_forward(Int8Args{}, x, Tensor::zeros({3, 8}), s, Tensor(), y);
      },
      {"int8_linear_forward", "'q'"});
  expect_error_naming([&] { int8_linear_forward(Int8Args{.group_size = 4}, x, q, s, Tensor(), y); },
                      {"int8_linear_forward", "'scales'"});
  expect_error_naming(
      [&] {
        int8_linear_forward(Int8Args{}, Tensor::zeros({4, 5}), q, s, Tensor(), y);
      },
      {"int8_linear_forward", "in-features 8"});
  expect_error_naming([&] { int8_linear_forward(Int8Args{}, x, q, s, Tensor::zeros({4}), y); },
                      {"int8_linear_forward", "'bias'"});
  expect_error_naming([&] { int8_linear_forward(Int8Args{.group_size = -1}, x, q, s, Tensor(), y); },
                      {"int8_linear_forward", "group_size -1"});
  Tensor w = Tensor::zeros({3, 8}), two_scales = Tensor::zeros({3, 2});
  expect_error_naming([&] { quantize_int8(Int8Args{}, w, q, two_scales); }, {"quantize_int8", "'scales'"});
}

}  // namespace
}  // namespace myriad
