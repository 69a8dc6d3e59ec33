// Implementation of the float64 test helpers.
#include "reference.h"

#include <cmath>
#include <cstdlib>
#include <random>
#include <sstream>

#include "myriad/core/philox.h"

namespace myriad::testing {

std::uint64_t fresh_seed() {
  if (const char* fixed = std::getenv("MYRIAD_TEST_SEED")) return std::strtoull(fixed, nullptr, 10);
  std::random_device device;
  return (static_cast<std::uint64_t>(device()) << 32) ^ device();
}

std::string random_bytes(std::size_t n, std::uint64_t seed) {
  std::mt19937_64 draw(seed);
  std::string out(n, '\0');
  for (char& c : out) c = static_cast<char>(draw());
  return out;
}

Tensor random_tensor(const Shape& shape, std::uint64_t seed, std::uint64_t stream, float low, float high, DType dtype) {
  Tensor t = Tensor::empty(shape, dtype);
  fill_uniform(t, low, high, seed, stream);
  return t;
}

Tensor random_ids(const Shape& shape, std::int32_t high, std::uint64_t seed, std::uint64_t stream) {
  Tensor t = Tensor::empty(shape, DType::i32);
  std::int32_t* ids = t.data<std::int32_t>();
  for (std::int64_t i = 0; i < t.numel(); ++i) {
    ids[i] = static_cast<std::int32_t>(philox4x32(seed, stream, static_cast<std::uint64_t>(i))[0] %
                                       static_cast<std::uint32_t>(high));
  }
  return t;
}

std::vector<double> to_f64(const Tensor& t) {
  Tensor dense = Tensor::empty(t.shape(), DType::f32);
  dense.copy_from(t);
  const float* p = dense.data<float>();
  return std::vector<double>(p, p + dense.numel());
}

Tensor from_f64(const std::vector<double>& values, const Shape& shape, DType dtype) {
  Tensor dense = Tensor::empty(shape, DType::f32);
  EXPECT_EQ(static_cast<std::int64_t>(values.size()), dense.numel());
  float* p = dense.data<float>();
  for (std::size_t i = 0; i < values.size(); ++i) p[i] = static_cast<float>(values[i]);
  return dtype == DType::f32 ? dense : dense.to(dtype);
}

void expect_close(const std::vector<double>& actual, const std::vector<double>& expected, double atol, double rtol,
                  const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what << ": element count differs";
  std::size_t worst = 0;
  double worst_excess = -1.0;
  std::size_t failures = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    double tolerance = atol + rtol * std::fabs(expected[i]);
    double error = std::fabs(actual[i] - expected[i]);
    if (!(error <= tolerance)) ++failures;  // NaN counts as failure
    double excess = std::isnan(error) ? INFINITY : error - tolerance;
    if (excess > worst_excess) {
      worst_excess = excess;
      worst = i;
    }
  }
  EXPECT_EQ(failures, 0u) << what << ": " << failures << " of " << actual.size() << " elements out of tolerance (atol "
                          << atol << ", rtol " << rtol << "); worst at flat index " << worst << ": actual "
                          << actual[worst] << " expected " << expected[worst];
}

void expect_close(const Tensor& actual, const std::vector<double>& expected, double atol, double rtol,
                  const std::string& what) {
  expect_close(to_f64(actual), expected, atol, rtol, what);
}

std::vector<double> numerical_gradient(const std::function<double(const std::vector<double>&)>& f,
                                       std::vector<double> x, double eps) {
  std::vector<double> grad(x.size());
  for (std::size_t i = 0; i < x.size(); ++i) {
    double saved = x[i];
    x[i] = saved + eps;
    double plus = f(x);
    x[i] = saved - eps;
    double minus = f(x);
    x[i] = saved;
    grad[i] = (plus - minus) / (2.0 * eps);
  }
  return grad;
}

void set_shifted(Tensor& value, const Tensor& base, const std::vector<double>& direction, double step) {
  float* w = value.data<float>();
  const float* b = base.data<float>();
  for (std::int64_t k = 0; k < value.numel(); ++k) w[k] = b[k] + static_cast<float>(step * direction[k]);
}

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double sum = 0.0;
  for (std::size_t i = 0; i < a.size() && i < b.size(); ++i) sum += a[i] * b[i];
  return sum;
}

}  // namespace myriad::testing
