// Test support: fresh random inputs, float64 conversions, comparisons and central finite
// differences. Every op test builds its expected values with a naive float64 implementation
// from these helpers; gradients are checked against finite differences of that float64 code.
//
// Seeds are fresh per run (std::random_device) and printed on failure through SCOPED_TRACE;
// set MYRIAD_TEST_SEED=<n> to replay a failing run exactly.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "myriad/core/tensor.h"

namespace myriad::testing {

std::uint64_t fresh_seed();

// f32 tensor (or `dtype`) with values uniform in [low, high) from (seed, stream).
Tensor random_tensor(const Shape& shape, std::uint64_t seed, std::uint64_t stream, float low = -1.0f, float high = 1.0f,
                     DType dtype = DType::f32);
// Random int32 ids in [0, high).
Tensor random_ids(const Shape& shape, std::int32_t high, std::uint64_t seed, std::uint64_t stream);
// n random bytes drawn from `seed` (keys, file contents).
std::string random_bytes(std::size_t n, std::uint64_t seed);

std::vector<double> to_f64(const Tensor& t);  // logical row-major order, any strides/dtype
Tensor from_f64(const std::vector<double>& values, const Shape& shape, DType dtype = DType::f32);

// Asserts |actual - expected| <= atol + rtol * |expected| elementwise; the failure message names
// `what`, the worst index, both values and the seed trace.
void expect_close(const Tensor& actual, const std::vector<double>& expected, double atol, double rtol,
                  const std::string& what);
void expect_close(const std::vector<double>& actual, const std::vector<double>& expected, double atol, double rtol,
                  const std::string& what);

// Central differences d f / d x_i = (f(x + eps e_i) - f(x - eps e_i)) / (2 eps), in float64.
std::vector<double> numerical_gradient(const std::function<double(const std::vector<double>&)>& f,
                                       std::vector<double> x, double eps = 1e-6);

// sum_i a_i * b_i
double dot(const std::vector<double>& a, const std::vector<double>& b);
// value = base + step * direction (f32 tensors of one shape, contiguous; direction in float64):
// a point along a directional finite difference.
void set_shifted(Tensor& value, const Tensor& base, const std::vector<double>& direction, double step);

}  // namespace myriad::testing

#define MYRIAD_SEED_TRACE(seed) \
  SCOPED_TRACE("seed " + std::to_string(seed) + " (replay with MYRIAD_TEST_SEED=" + std::to_string(seed) + ")")
