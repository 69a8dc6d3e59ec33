// CompressedSum's error feedback in a group of one: the sum of T outputs equals T inputs minus the
// errors left over (nothing is lost, only delayed), for every code. The codes themselves are
// checked against float64 references in tests/ops/test_compression.cpp.
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
