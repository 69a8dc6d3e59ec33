// GELU kernels (kernels/activations/gelu.cu) against float64: f32 and bf16, the 16-byte packet
// path and the element path (offset pointers), tails that end inside a packet, in-place calls,
// and argument validation (which needs no GPU and runs everywhere).
//
// Tolerances. f32: tanhf/coshf are within 2 ulp; near saturation (|x| up to 6 here) 1 + tanh(u)
// carries an absolute error of ~1e-7 that 0.5 x scales to a few 1e-7, the remaining products add
// a few ulp relative: atol 1e-6, rtol 4e-6 (a host emulation of the kernel's f32 arithmetic over
// 2e6 inputs peaks at 10% of that). bf16: the f32 result y' (error d within the f32 tolerance) is
// rounded to bf16, adding at most half an ulp <= 2^-8 |y'|: rtol 2^-8 + 1e-5, atol 2e-6; this
// bound is reached (to ~99%) by values just above a power of two. The backward reference is the
// central difference of the float64 forward (step 1e-5: error ~1e-10).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <numbers>
#include <ostream>
#include <string>
#include <vector>

#include "gpu_test_support.h"
#include "myriad/core/error.h"
#include "myriad/core/half.h"
#include "myriad/cuda/kernels.h"
#include "reference.h"

namespace myriad {
namespace {

using testing::DeviceArray;
using testing::expect_error_mentions;

double gelu_f64(double x) {
  const double u = std::sqrt(2.0 / std::numbers::pi) * (x + 0.044715 * x * x * x);
  return 0.5 * x * (1.0 + std::tanh(u));
}

double gelu_grad_f64(double x) {
  const double h = 1e-5;
  return (gelu_f64(x + h) - gelu_f64(x - h)) / (2.0 * h);
}

// Random values already rounded to bf16, as raw bit patterns.
std::vector<std::uint16_t> random_bf16(std::int64_t n, std::uint64_t seed, std::uint64_t stream, float low,
                                       float high) {
  std::vector<std::uint16_t> bits;
  for (float v : testing::random_tensor_floats(n, seed, stream, low, high)) bits.push_back(float_to_bf16(v));
  return bits;
}

std::vector<double> bf16_to_f64(const std::vector<std::uint16_t>& bits) {
  std::vector<double> out;
  out.reserve(bits.size());
  for (std::uint16_t b : bits) out.push_back(bf16_to_float(b));
  return out;
}

const __nv_bfloat16* as_bf16(const std::uint16_t* p) { return reinterpret_cast<const __nv_bfloat16*>(p); }
__nv_bfloat16* as_bf16(std::uint16_t* p) { return reinterpret_cast<__nv_bfloat16*>(p); }

struct GeluCase {
  std::int64_t n;
  std::int64_t x_offset;  // element offsets into the allocations: non-zero breaks 16-byte alignment
  std::int64_t out_offset;
};

void PrintTo(const GeluCase& c, std::ostream* os) {
  *os << "n=" << c.n << " x_offset=" << c.x_offset << " out_offset=" << c.out_offset;
}

std::string case_name(const ::testing::TestParamInfo<GeluCase>& info) {
  return "n" + std::to_string(info.param.n) + "_x" + std::to_string(info.param.x_offset) + "_out" +
         std::to_string(info.param.out_offset);
}

class GeluKernel : public ::testing::TestWithParam<GeluCase> {};

TEST_P(GeluKernel, F32ForwardAndBackwardMatchFloat64) {
  MYRIAD_REQUIRE_GPU();
  const GeluCase c = GetParam();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  const std::vector<float> x = testing::random_tensor_floats(c.n, seed, 0, -6.0f, 6.0f);
  const std::vector<float> grad_out = testing::random_tensor_floats(c.n, seed, 1, -1.0f, 1.0f);
  DeviceArray<float> dx(context, x, c.x_offset), dgo(context, grad_out, c.x_offset);
  DeviceArray<float> dout(context, c.n, c.out_offset), dgx(context, c.n, c.out_offset);

  cuda::gelu_forward_f32(dx.get(), dout.get(), c.n, context.stream());
  cuda::gelu_backward_f32(dx.get(), dgo.get(), dgx.get(), c.n, context.stream());
  std::vector<double> expected_out, expected_gx;
  for (std::int64_t i = 0; i < c.n; ++i) {
    expected_out.push_back(gelu_f64(x[i]));
    expected_gx.push_back(gelu_grad_f64(x[i]) * grad_out[i]);
  }
  const std::vector<float> out = dout.download(), gx = dgx.download();
  testing::expect_close(std::vector<double>(out.begin(), out.end()), expected_out, 1e-6, 4e-6, "gelu f32 forward");
  testing::expect_close(std::vector<double>(gx.begin(), gx.end()), expected_gx, 1e-6, 4e-6, "gelu f32 backward");
}

TEST_P(GeluKernel, Bf16ForwardAndBackwardMatchFloat64) {
  MYRIAD_REQUIRE_GPU();
  const GeluCase c = GetParam();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  const std::vector<std::uint16_t> x = random_bf16(c.n, seed, 0, -6.0f, 6.0f);
  const std::vector<std::uint16_t> grad_out = random_bf16(c.n, seed, 1, -1.0f, 1.0f);
  DeviceArray<std::uint16_t> dx(context, x, c.x_offset), dgo(context, grad_out, c.x_offset);
  DeviceArray<std::uint16_t> dout(context, c.n, c.out_offset), dgx(context, c.n, c.out_offset);

  cuda::gelu_forward_bf16(as_bf16(dx.get()), as_bf16(dout.get()), c.n, context.stream());
  cuda::gelu_backward_bf16(as_bf16(dx.get()), as_bf16(dgo.get()), as_bf16(dgx.get()), c.n, context.stream());
  const std::vector<double> xv = bf16_to_f64(x), gov = bf16_to_f64(grad_out);
  std::vector<double> expected_out, expected_gx;
  for (std::int64_t i = 0; i < c.n; ++i) {
    expected_out.push_back(gelu_f64(xv[i]));
    expected_gx.push_back(gelu_grad_f64(xv[i]) * gov[i]);
  }
  const double rtol = std::ldexp(1.0, -8) + 1e-5;
  testing::expect_close(bf16_to_f64(dout.download()), expected_out, 2e-6, rtol, "gelu bf16 forward");
  testing::expect_close(bf16_to_f64(dgx.download()), expected_gx, 2e-6, rtol, "gelu bf16 backward");
}

// Sizes: single element, shorter than a packet, exactly one f32 packet, tails inside a packet,
// several blocks. Offsets: all aligned (packet path), both shifted, only the output shifted.
INSTANTIATE_TEST_SUITE_P(Sizes, GeluKernel,
                         ::testing::Values(GeluCase{1, 0, 0}, GeluCase{3, 0, 0}, GeluCase{4, 0, 0}, GeluCase{8, 0, 0},
                                           GeluCase{13, 0, 0}, GeluCase{1000, 0, 0}, GeluCase{4099, 0, 0},
                                           GeluCase{70001, 0, 0}, GeluCase{4099, 1, 1}, GeluCase{1000, 0, 3},
                                           GeluCase{70001, 3, 0}),
                         case_name);

TEST(GeluKernelInPlace, InPlaceEqualsOutOfPlace) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  const std::int64_t n = 5003;
  const std::vector<float> x = testing::random_tensor_floats(n, seed, 0, -6.0f, 6.0f);
  const std::vector<float> grad_out = testing::random_tensor_floats(n, seed, 1, -1.0f, 1.0f);
  DeviceArray<float> dx(context, x), dgo(context, grad_out), dout(context, n), dgx(context, n);
  cuda::gelu_forward_f32(dx.get(), dout.get(), n, context.stream());
  cuda::gelu_backward_f32(dx.get(), dgo.get(), dgx.get(), n, context.stream());

  DeviceArray<float> inplace_x(context, x), inplace_g(context, grad_out);
  cuda::gelu_backward_f32(dx.get(), inplace_g.get(), inplace_g.get(), n, context.stream());
  cuda::gelu_forward_f32(inplace_x.get(), inplace_x.get(), n, context.stream());
  EXPECT_EQ(inplace_x.download(), dout.download());
  EXPECT_EQ(inplace_g.download(), dgx.download());
}

// ---- validation: fails before anything reaches the GPU, so these run without a device ------

// NOLINTNEXTLINE(performance-no-int-to-ptr): fake device address, never dereferenced: argument checks fail first
float* fake_f32(std::uintptr_t address) { return reinterpret_cast<float*>(address); }

TEST(GeluKernelValidation, BadArgumentsThrowNamingLauncherAndArgument) {
  float* a = fake_f32(0x10000);
  float* b = fake_f32(0x20000);
  expect_error_mentions([&] { cuda::gelu_forward_f32(nullptr, b, 10, nullptr); }, {"gelu_forward_f32", "x is null"});
  expect_error_mentions([&] { cuda::gelu_forward_f32(a, b, -1, nullptr); },
                        {"gelu_forward_f32", "n must be >= 0", "-1"});
  expect_error_mentions([&] { cuda::gelu_forward_f32(a, fake_f32(0x20002), 10, nullptr); },
                        {"gelu_forward_f32", "out", "4-byte aligned"});
  expect_error_mentions([&] { cuda::gelu_forward_f32(a, a + 1, 10, nullptr); }, {"gelu_forward_f32", "overlaps x"});
  expect_error_mentions([&] { cuda::gelu_backward_f32(a, b, b + 3, 10, nullptr); },
                        {"gelu_backward_f32", "grad_x", "overlaps grad_out"});
  expect_error_mentions([&] { cuda::gelu_backward_f32(a, b, nullptr, 10, nullptr); },
                        {"gelu_backward_f32", "grad_x is null"});
  auto* h = reinterpret_cast<__nv_bfloat16*>(0x30001);
  expect_error_mentions(
      [&] { cuda::gelu_forward_bf16(h, as_bf16(reinterpret_cast<std::uint16_t*>(0x40000)), 8, nullptr); },
      {"gelu_forward_bf16", "x", "2-byte aligned"});
  // Empty input: nothing to check or enqueue, even with null pointers.
  EXPECT_NO_THROW(cuda::gelu_forward_f32(nullptr, static_cast<float*>(nullptr), 0, nullptr));
  EXPECT_NO_THROW(cuda::gelu_backward_bf16(nullptr, nullptr, nullptr, 0, nullptr));
}

}  // namespace
}  // namespace myriad
