// Compression codes against naive references, and CompressedSum's error feedback in a group of
// one: the sum of T outputs equals T inputs minus the errors left over (nothing is lost, only
// delayed), for every code.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "myriad/distributed/compressed_sum.h"
#include "myriad/distributed/loopback_communicator.h"

namespace myriad::distributed {
namespace {

std::vector<float> random_values(std::int64_t n, std::uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> v(static_cast<std::size_t>(n));
  for (float& x : v) x = normal(rng);
  return v;
}

std::vector<float> round_trip(const CompressionSpec& spec, const std::vector<float>& y, std::vector<float>* encoded) {
  const auto n = static_cast<std::int64_t>(y.size());
  std::vector<std::byte> code(static_cast<std::size_t>(encoded_bytes(spec, n)));
  std::vector<float> at_encoder(y.size()), decoded(y.size());
  encode(spec, y.data(), n, code.data(), at_encoder.data());
  decode(spec, code.data(), n, decoded.data(), false);
  if (encoded) *encoded = at_encoder;
  return decoded;
}

TEST(Compression, SignKeepsSignsAndTheMeanMagnitudeOfEachBlock) {
  const CompressionSpec spec{Compression::sign};
  for (std::int64_t n : {1, 7, 64, 2500}) {
    const std::vector<float> y = random_values(n, 3);
    std::vector<float> at_encoder;
    const std::vector<float> d = round_trip(spec, y, &at_encoder);
    EXPECT_EQ(d, at_encoder) << "encode's decoded copy must equal decode's";
    for (std::int64_t begin = 0; begin < n; begin += 64) {
      const std::int64_t end = std::min<std::int64_t>(n, begin + 64);
      double mass = 0.0;
      for (std::int64_t i = begin; i < end; ++i) mass += std::fabs(static_cast<double>(y[i]));
      const double scale = mass / static_cast<double>(end - begin);
      for (std::int64_t i = begin; i < end; ++i) {
        EXPECT_NEAR(d[i], y[i] < 0 ? -scale : scale, 1e-6 * scale) << "n=" << n << " i=" << i;
      }
    }
    // 1 bit per element plus an f32 per 64.
    EXPECT_EQ(encoded_bytes(spec, n), (n + 63) / 64 * 4 + (n / 64) * 8 + ((n % 64) + 7) / 8);
  }
}

TEST(Compression, Int8ErrorIsAtMostHalfAStep) {
  const CompressionSpec spec{Compression::int8};
  const std::vector<float> y = random_values(1000, 4);
  const std::vector<float> d = round_trip(spec, y, nullptr);
  for (std::int64_t begin = 0; begin < 1000; begin += 256) {
    const std::int64_t end = std::min<std::int64_t>(1000, begin + 256);
    float largest = 0.0f;
    for (std::int64_t i = begin; i < end; ++i) largest = std::max(largest, std::fabs(y[i]));
    for (std::int64_t i = begin; i < end; ++i) EXPECT_LE(std::fabs(d[i] - y[i]), largest / 127.0f * 0.5001f);
  }
  EXPECT_EQ(encoded_bytes(spec, 1000), 1000 + 4 * 4);
  const std::vector<float> zeros(300, 0.0f);
  EXPECT_EQ(round_trip(spec, zeros, nullptr), zeros);
}

TEST(Compression, TopKKeepsExactlyTheLargestMagnitudes) {
  const CompressionSpec spec{Compression::topk, 0.1};
  const std::vector<float> y = random_values(95, 5);
  const std::vector<float> d = round_trip(spec, y, nullptr);
  std::vector<float> magnitudes;
  magnitudes.reserve(y.size());
  for (float v : y) magnitudes.push_back(std::fabs(v));
  std::sort(magnitudes.begin(), magnitudes.end(), std::greater<>());
  const float threshold = magnitudes[9];  // ceil(0.1 * 95) = 10 kept
  int kept = 0;
  for (std::size_t i = 0; i < y.size(); ++i) {
    if (d[i] != 0.0f) {
      ++kept;
      EXPECT_EQ(d[i], y[i]);
      EXPECT_GE(std::fabs(y[i]), threshold);
    } else {
      EXPECT_LE(std::fabs(y[i]), threshold);
    }
  }
  EXPECT_EQ(kept, 10);
  EXPECT_EQ(encoded_bytes(spec, 95), 80);
}

TEST(CompressedSum, ErrorFeedbackDelaysButNeverLosesAnything) {
  for (CompressionSpec spec : {CompressionSpec{Compression::sign}, CompressionSpec{Compression::int8},
                               CompressionSpec{Compression::topk, 0.05}}) {
    SCOPED_TRACE(compression_name(spec.kind));
    LoopbackCommunicator group("dp");
    const std::int64_t n = 3000;
    CompressedSum sum(group, n, spec);
    std::vector<double> inputs(n, 0.0), outputs(n, 0.0);
    for (int t = 0; t < 50; ++t) {
      const std::vector<float> x = random_values(n, 100 + t);
      Tensor tensor = Tensor::empty({n});
      std::copy(x.begin(), x.end(), tensor.data<float>());
      sum.sum(tensor);
      for (std::int64_t i = 0; i < n; ++i) {
        inputs[i] += x[i];
        outputs[i] += tensor.data<float>()[i];
      }
    }
    // sum of outputs = sum of inputs - what the worker and the server still hold.
    double worst = 0.0, mean_abs_error = 0.0;
    for (std::int64_t i = 0; i < n; ++i) {
      const double held = sum.worker_error().data<float>()[i] + sum.server_error().data<float>()[i];
      worst = std::max(worst, std::fabs(outputs[i] - (inputs[i] - held)));
      mean_abs_error += std::fabs(outputs[i] - inputs[i]) / n;
    }
    EXPECT_LT(worst, 1e-3);
    // Without feedback the sign code's error would grow like T; with it, it stays bounded.
    EXPECT_LT(mean_abs_error, 5.0);
  }
}

}  // namespace
}  // namespace myriad::distributed
