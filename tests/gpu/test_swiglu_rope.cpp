// SwiGLU and RoPE kernels against the CPU ops on fresh random inputs. SwiGLU: out, grad_gate,
// grad_up (atol 1e-6, rtol 2e-6: expf and the CPU's exp differ by an ulp or two), in place too,
// and a skipped gradient. RoPE: forward, then backward (the rotation by -angle) recovering the
// input, with a position offset; the cos/sin tables are the CPU op's float64-rounded values, so
// the only difference is the rotation's two products and their sum (atol 1e-6).
#include <gtest/gtest.h>

#include <vector>

#include "gpu_test_support.h"
#include "myriad/core/philox.h"
#include "myriad/cuda/kernels.h"
#include "myriad/ops/activations.h"
#include "myriad/ops/rope.h"
#include "reference.h"

namespace myriad {
namespace {

using testing::as_f64;
using testing::DeviceArray;
using testing::expect_error_mentions;

Tensor random_tensor(const Shape& shape, float low, float high, std::uint64_t seed, std::uint64_t stream) {
  Tensor t = Tensor::empty(shape);
  fill_uniform(t, low, high, seed, stream);
  return t;
}

std::vector<float> host_floats(const Tensor& t) {
  return std::vector<float>(t.data<float>(), t.data<float>() + t.numel());
}
TEST(SwigluKernel, MatchesTheCpuOp) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  for (std::int64_t n : {1, 1000, 3 * 65536 + 5}) {
    Tensor gate = random_tensor({n}, -6, 6, seed, 1), up = random_tensor({n}, -2, 2, seed, 2);
    Tensor grad_out = random_tensor({n}, -1, 1, seed, 3);
    Tensor out = Tensor::empty({n}), gg = Tensor::empty({n}), gu = Tensor::empty({n});
    swiglu_forward(SwigluArgs{}, gate, up, out);
    swiglu_backward(SwigluArgs{}, gate, up, grad_out, gg, gu);
    DeviceArray<float> dg(context, host_floats(gate)), du(context, host_floats(up)),
        dgo(context, host_floats(grad_out));
    DeviceArray<float> dout(context, n), dgg(context, n), dgu(context, n);
    cuda::swiglu_forward_f32(dg.get(), du.get(), dout.get(), n, context.stream());
    cuda::swiglu_backward_f32(dg.get(), du.get(), dgo.get(), dgg.get(), dgu.get(), n, context.stream());
    const std::string what = "n=" + std::to_string(n);
    testing::expect_close(as_f64(dout.download()), testing::to_f64(out), 1e-6, 2e-6, "swiglu out " + what);
    testing::expect_close(as_f64(dgg.download()), testing::to_f64(gg), 1e-6, 2e-6, "swiglu grad_gate " + what);
    testing::expect_close(as_f64(dgu.download()), testing::to_f64(gu), 1e-6, 2e-6, "swiglu grad_up " + what);
    // In place over the gate, grad_up skipped.
    cuda::swiglu_backward_f32(dg.get(), du.get(), dgo.get(), dg.get(), nullptr, n, context.stream());
    testing::expect_close(as_f64(dg.download()), testing::to_f64(gg), 1e-6, 2e-6, "swiglu grad_gate in place " + what);
  }
}

TEST(SwigluKernel, OverlappingOutputIsRejected) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): fake device address, never dereferenced: argument checks fail first
  float* fake = reinterpret_cast<float*>(std::uintptr_t{256});
  expect_error_mentions([&] { cuda::swiglu_forward_f32(fake, fake + 8, fake + 1, 8, nullptr); },
                        {"swiglu_forward_f32", "overlaps"});
}

TEST(RopeKernel, MatchesTheCpuOpAndBackwardInverts) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  struct Case {
    std::int64_t b, t, h, d, offset;
  };
  for (const Case& c : {Case{1, 1, 1, 2, 0}, Case{2, 37, 4, 64, 0}, Case{1, 300, 2, 128, 5000}}) {
    const RopeArgs args{.theta = 10000.0, .position_offset = c.offset};
    Tensor x = random_tensor({c.b, c.t, c.h, c.d}, -2, 2, seed, 4), out = Tensor::empty({c.b, c.t, c.h, c.d});
    rope_forward(args, x, out);
    DeviceArray<float> dx(context, host_floats(x)), dout(context, x.numel());
    DeviceArray<float> cos_table(context, c.t * c.d / 2), sin_table(context, c.t * c.d / 2);
    cuda::rope_table_f32(cos_table.get(), sin_table.get(), c.t, c.d, args.theta, c.offset, context.stream());
    cuda::rope_f32(dx.get(), dout.get(), cos_table.get(), sin_table.get(), c.b, c.t, c.h, c.d, false, context.stream());
    const std::string what = "T " + std::to_string(c.t) + ", D " + std::to_string(c.d);
    testing::expect_close(as_f64(dout.download()), testing::to_f64(out), 1e-6, 1e-6, "rope forward " + what);
    cuda::rope_f32(dout.get(), dout.get(), cos_table.get(), sin_table.get(), c.b, c.t, c.h, c.d, true,
                   context.stream());
    testing::expect_close(as_f64(dout.download()), testing::to_f64(x), 2e-6, 2e-6, "rope backward(forward(x)) " + what);
  }
}

TEST(RopeKernel, OddHeadDimIsRejected) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): fake device address, never dereferenced: argument checks fail first
  float* fake = reinterpret_cast<float*>(std::uintptr_t{256});
  expect_error_mentions([&] { cuda::rope_f32(fake, fake, fake, fake, 1, 1, 1, 3, false, nullptr); },
                        {"rope_forward_f32", "head_dim must be even"});
}

}  // namespace
}  // namespace myriad
