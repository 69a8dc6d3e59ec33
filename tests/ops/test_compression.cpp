// The compression ops (ops/compression.h) and 1-bit Adam's update (ops/onebit_adam_update.h)
// against naive float64 references written from the documented formulas: the code bytes
// (scales, sign bits, int8 levels, top-k indices in order with ties to the lower index), the
// decoded values, the error feedback (error_after = x + error_before - decoded, and nothing lost:
// decoded + error_after = x + error_before to an ulp), decode's `=` and `+=`, and the argument
// checks naming the op.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "myriad/core/error.h"
#include "myriad/ops/compression.h"
#include "myriad/ops/onebit_adam_update.h"

namespace myriad {
namespace {

Tensor normal_tensor(std::int64_t n, std::uint32_t seed, float spread = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, spread);
  Tensor t = Tensor::empty({n});
  for (std::int64_t i = 0; i < n; ++i) t.data<float>()[i] = normal(rng);
  return t;
}

float code_float(const Tensor& code, std::int64_t at) {
  float value = 0.0f;
  std::memcpy(&value, static_cast<const std::byte*>(code.raw_data()) + at, 4);
  return value;
}
std::int32_t code_int(const Tensor& code, std::int64_t at) {
  std::int32_t value = 0;
  std::memcpy(&value, static_cast<const std::byte*>(code.raw_data()) + at, 4);
  return value;
}
std::uint8_t code_byte(const Tensor& code, std::int64_t at) {
  return static_cast<const std::uint8_t*>(code.raw_data())[at];
}

struct Encoded {
  Tensor code, error_after, decoded;
  std::vector<double> y;  // x + error_before in float64
};

Encoded encode_and_decode(const CompressionSpec& spec, const Tensor& x, const Tensor& error_before) {
  Encoded out;
  out.code = Tensor::empty({encoded_bytes(spec, x.numel())}, DType::i8);
  out.error_after = error_before.clone();
  compress_encode(spec, x, out.error_after, out.code);
  out.decoded = Tensor::empty({x.numel()});
  compress_decode(spec, out.code, out.decoded, false);
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    out.y.push_back(static_cast<double>(x.data<float>()[i]) + error_before.data<float>()[i]);
  }
  return out;
}

// The error feedback: error_after = fl(y - decoded) with y = fl(x + error_before), so
// decoded + error_after equals y to the two roundings (an ulp of the largest of the three each).
void expect_nothing_lost(const Encoded& e) {
  for (std::size_t i = 0; i < e.y.size(); ++i) {
    const double kept = static_cast<double>(e.decoded.data<float>()[i]) + e.error_after.data<float>()[i];
    const double largest = std::max({std::fabs(e.y[i]), std::fabs(static_cast<double>(e.decoded.data<float>()[i])),
                                     std::fabs(static_cast<double>(e.error_after.data<float>()[i])), 1e-30});
    const double ulp = std::ldexp(1.0, std::ilogb(largest) - 23);
    ASSERT_NEAR(kept, e.y[i], 2.0 * ulp) << "element " << i;
  }
}

TEST(CompressionOps, SignCodeIsTheMeanMagnitudeAndTheSignBitsOfEachBlock) {
  const CompressionSpec spec{Compression::sign};
  for (std::int64_t n : {1, 7, 63, 64, 65, 200, 2500}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const Tensor x = normal_tensor(n, 3), error = normal_tensor(n, 4, 0.1f);
    const Encoded e = encode_and_decode(spec, x, error);
    ASSERT_EQ(e.code.numel(), (n / 64) * 12 + (n % 64 > 0 ? 4 + (n % 64 + 7) / 8 : 0));
    for (std::int64_t begin = 0, at = 0; begin < n; begin += 64) {
      const std::int64_t b = std::min<std::int64_t>(64, n - begin);
      double mass = 0.0;
      for (std::int64_t i = begin; i < begin + b; ++i) mass += std::fabs(static_cast<float>(e.y[i]));
      const double scale = mass / static_cast<double>(b);
      EXPECT_NEAR(code_float(e.code, at), scale, 1e-6 * scale);
      for (std::int64_t i = 0; i < b; ++i) {
        const bool negative = static_cast<float>(e.y[begin + i]) < 0.0f;
        EXPECT_EQ((code_byte(e.code, at + 4 + i / 8) >> (i % 8)) & 1, negative ? 1 : 0) << "bit " << begin + i;
        EXPECT_NEAR(e.decoded.data<float>()[begin + i], negative ? -scale : scale, 1e-6 * scale);
      }
      at += 4 + (b + 7) / 8;
    }
    expect_nothing_lost(e);
  }
}

TEST(CompressionOps, Int8CodeRoundsEachValueToTheNearestLevelOfItsBlock) {
  const CompressionSpec spec{Compression::int8};
  for (std::int64_t n : {1, 255, 256, 1000}) {
    SCOPED_TRACE("n=" + std::to_string(n));
    const Tensor x = normal_tensor(n, 5), error = normal_tensor(n, 6, 0.1f);
    const Encoded e = encode_and_decode(spec, x, error);
    ASSERT_EQ(e.code.numel(), n + 4 * ((n + 255) / 256));
    for (std::int64_t begin = 0, at = 0; begin < n; begin += 256) {
      const std::int64_t b = std::min<std::int64_t>(256, n - begin);
      double largest = 0.0;
      for (std::int64_t i = begin; i < begin + b; ++i) largest = std::max(largest, std::fabs(e.y[i]));
      const double scale = largest / 127.0;
      const float stored = code_float(e.code, at);
      EXPECT_NEAR(stored, scale, 1e-6 * scale);
      for (std::int64_t i = 0; i < b; ++i) {
        const double ratio = e.y[begin + i] / scale;
        const auto q = static_cast<std::int8_t>(code_byte(e.code, at + 4 + i));
        // The nearest level, except within rounding of a tie between two levels.
        if (std::fabs(std::fabs(ratio - std::floor(ratio)) - 0.5) > 1e-4) {
          EXPECT_EQ(q, static_cast<int>(std::nearbyint(ratio))) << "element " << begin + i;
        }
        EXPECT_LE(std::abs(static_cast<int>(q)), 127);
        EXPECT_EQ(e.decoded.data<float>()[begin + i], static_cast<float>(q) * stored);
      }
      at += 4 + b;
    }
    expect_nothing_lost(e);
  }
  const Tensor zeros = Tensor::zeros({300});
  const Encoded e = encode_and_decode(spec, zeros, Tensor::zeros({300}));
  for (std::int64_t i = 0; i < 300; ++i) EXPECT_EQ(e.decoded.data<float>()[i], 0.0f);
}

TEST(CompressionOps, TopKKeepsTheLargestMagnitudesWithTiesToTheLowerIndex) {
  for (double ratio : {0.001, 0.1, 0.37, 1.0}) {
    for (std::int64_t n : {1, 95, 1000}) {
      SCOPED_TRACE("ratio " + std::to_string(ratio) + " n=" + std::to_string(n));
      const CompressionSpec spec{Compression::topk, ratio};
      Tensor x = normal_tensor(n, 7);
      // Ties: every fifth value shares one magnitude with alternating signs.
      for (std::int64_t i = 0; i < n; i += 5) x.data<float>()[i] = (i % 2 == 0 ? 1.5f : -1.5f);
      const Tensor error = Tensor::zeros({n});
      const Encoded e = encode_and_decode(spec, x, error);
      const std::int64_t k = std::clamp<std::int64_t>(static_cast<std::int64_t>(std::ceil(ratio * n)), 1, n);
      ASSERT_EQ(e.code.numel(), 8 * k);
      std::vector<std::int64_t> order(static_cast<std::size_t>(n));
      std::iota(order.begin(), order.end(), 0);
      std::stable_sort(order.begin(), order.end(),
                       [&](std::int64_t a, std::int64_t b) { return std::fabs(e.y[a]) > std::fabs(e.y[b]); });
      order.resize(static_cast<std::size_t>(k));
      std::sort(order.begin(), order.end());
      for (std::int64_t j = 0; j < k; ++j) {
        const std::int64_t index = order[static_cast<std::size_t>(j)];
        EXPECT_EQ(code_int(e.code, 4 * j), index) << "slot " << j;
        EXPECT_EQ(code_float(e.code, 4 * (k + j)), static_cast<float>(e.y[index]));
      }
      std::vector<bool> sent(static_cast<std::size_t>(n), false);
      for (std::int64_t index : order) sent[static_cast<std::size_t>(index)] = true;
      for (std::int64_t i = 0; i < n; ++i) {
        EXPECT_EQ(e.decoded.data<float>()[i], sent[i] ? static_cast<float>(e.y[i]) : 0.0f);
        EXPECT_EQ(e.error_after.data<float>()[i], sent[i] ? 0.0f : static_cast<float>(e.y[i]));
      }
    }
  }
}

TEST(CompressionOps, DecodeWritesOrAccumulates) {
  for (const CompressionSpec spec : {CompressionSpec{Compression::sign}, CompressionSpec{Compression::int8},
                                     CompressionSpec{Compression::topk, 0.2}}) {
    SCOPED_TRACE(compression_name(spec.kind));
    const std::int64_t n = 300;
    const Encoded e = encode_and_decode(spec, normal_tensor(n, 9), Tensor::zeros({n}));
    const Tensor before = normal_tensor(n, 10);
    Tensor summed = before.clone();
    compress_decode(spec, e.code, summed, true);
    for (std::int64_t i = 0; i < n; ++i) {
      EXPECT_EQ(summed.data<float>()[i], before.data<float>()[i] + e.decoded.data<float>()[i]) << i;
    }
  }
}

TEST(CompressionOps, BadArgumentsNameTheOp) {
  const CompressionSpec int8{Compression::int8};
  Tensor x = Tensor::zeros({10}), error = Tensor::zeros({10}), short_code = Tensor::empty({5}, DType::i8);
  try {
    compress_encode(int8, x, error, short_code);
    ADD_FAILURE() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("compress_encode: a int8 code of 10 elements has 14 bytes, got 5"),
              std::string::npos)
        << e.what();
  }
  Tensor code = Tensor::empty({14}, DType::i8);
  EXPECT_THROW(compress_encode(int8, x, x, code), Error);  // x and error alias
  EXPECT_THROW(compress_encode(CompressionSpec{Compression::topk, 0.0}, x, error, code), Error);
  Tensor bad_topk = Tensor::empty({8}, DType::i8);
  const std::int32_t index = 10;
  std::memcpy(bad_topk.raw_data(), &index, 4);
  EXPECT_THROW(compress_decode(CompressionSpec{Compression::topk, 0.1}, bad_topk, x, false), Error);
}

TEST(OneBitAdamUpdateOp, MatchesTheFloat64Formula) {
  const std::int64_t n = 777;
  const Tensor p0 = normal_tensor(n, 11), m0 = normal_tensor(n, 12, 0.01f);
  Tensor v = normal_tensor(n, 13, 0.001f);
  for (std::int64_t i = 0; i < n; ++i) v.data<float>()[i] = v.data<float>()[i] * v.data<float>()[i];
  const OneBitAdamUpdateArgs args{
      .lr = 1e-3f, .decay = 1e-4f, .bias1 = 0.4f, .bias2 = 0.2f, .eps = 1e-8f, .inverse_replicas = 0.25f};
  Tensor p = p0.clone(), m = m0.clone();
  onebit_adam_update(args, p, m, v);
  for (std::int64_t i = 0; i < n; ++i) {
    const double momentum = static_cast<double>(m0.data<float>()[i]) * 0.25;
    const double decayed = p0.data<float>()[i] * (1.0 - static_cast<double>(args.decay));
    const double want = decayed - static_cast<double>(args.lr) * (momentum / args.bias1) /
                                      (std::sqrt(static_cast<double>(v.data<float>()[i]) / args.bias2) + args.eps);
    EXPECT_NEAR(m.data<float>()[i], momentum, 1e-7 * std::fabs(momentum));
    EXPECT_NEAR(p.data<float>()[i], want, 4e-7 * std::fabs(want) + 1e-9) << i;
  }
  Tensor wrong = Tensor::zeros({n - 1});
  EXPECT_THROW(onebit_adam_update(args, p, wrong, v), Error);
  // The local momentum: m = beta1 m + gain g.
  const Tensor g = normal_tensor(n, 14);
  Tensor momentum = m0.clone();
  onebit_adam_momentum(OneBitAdamMomentumArgs{.beta1 = 0.9f, .gain = 0.3f}, momentum, g);
  for (std::int64_t i = 0; i < n; ++i) {
    const double want = 0.9 * static_cast<double>(m0.data<float>()[i]) + 0.3 * static_cast<double>(g.data<float>()[i]);
    EXPECT_NEAR(momentum.data<float>()[i], want, 3e-7 * (std::fabs(want) + 0.3 * std::fabs(g.data<float>()[i])));
  }
  EXPECT_THROW(onebit_adam_momentum(OneBitAdamMomentumArgs{}, momentum, wrong), Error);
}

}  // namespace
}  // namespace myriad
