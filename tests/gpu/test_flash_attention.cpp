// Flash attention kernels (kernels/attention/flash_attention.cu) against the CPU attention op
// (ops/attention.h, itself checked against float64 and finite differences in tests/ops) on fresh
// random inputs: out, lse and grad_q / grad_k / grad_v, causal and not, multi-head and grouped
// (Hq 4 / Hkv 2 and 1), head dims 64 and 128, sequence lengths that are not multiples of the 32-row
// tiles. f32: both sides sum in f32 in different orders: atol 2e-5, rtol 1e-4. bf16: the inputs
// are rounded to bf16 and the CPU reference computes on those rounded values in f32; the GPU's
// outputs are rounded to bf16 once more (half an ulp, 2^-9 relative) on top of f32 math, so the
// tolerance is 2x the error of that rounding: rtol 2^-8, atol 2^-8 times the output scale. The
// tensor-core forward and backward (flash_attention_*_tc_bf16) are held to the same bf16 bars;
// their f16 instances (flash_attention_*_tc_f16, 11-bit mantissas: half an ulp is 2^-12) to 2^-10.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "gpu_test_support.h"
#include "myriad/core/half.h"
#include "myriad/core/philox.h"
#include "myriad/cuda/kernels.h"
#include "myriad/ops/attention.h"
#include "reference.h"

namespace myriad {
namespace {

using testing::as_f64;
using testing::DeviceArray;
using testing::expect_error_mentions;

struct Case {
  std::int64_t b, hq, hkv, t, d;
  bool causal;
};

std::vector<float> host(const Tensor& t) { return std::vector<float>(t.data<float>(), t.data<float>() + t.numel()); }
// 16-bit patterns of a host f32 tensor's values and back, for bf16 or f16 (core/half.h).
struct HalfFormat {
  std::uint16_t (*narrow)(float);
  float (*widen)(std::uint16_t);
};
constexpr HalfFormat kBf16{float_to_bf16, bf16_to_float};
constexpr HalfFormat kF16{float_to_f16, f16_to_float};

std::vector<std::uint16_t> to_half(const Tensor& t, HalfFormat f) {
  std::vector<std::uint16_t> out;
  for (std::int64_t i = 0; i < t.numel(); ++i) out.push_back(f.narrow(t.data<float>()[i]));
  return out;
}
std::vector<double> from_half(const std::vector<std::uint16_t>& v, HalfFormat f) {
  std::vector<double> out;
  out.reserve(v.size());
  for (std::uint16_t x : v) out.push_back(f.widen(x));
  return out;
}
void round_half(Tensor& t, HalfFormat f) {
  for (std::int64_t i = 0; i < t.numel(); ++i) t.data<float>()[i] = f.widen(f.narrow(t.data<float>()[i]));
}
std::vector<std::uint16_t> to_bf16(const Tensor& t) { return to_half(t, kBf16); }
std::vector<double> from_bf16(const std::vector<std::uint16_t>& v) { return from_half(v, kBf16); }
void round_bf16(Tensor& t) { round_half(t, kBf16); }

// Fresh random q, k, v and output gradient in [-1, 1] (rounded to `format` when given: the values
// a 16-bit kernel sees) and the CPU op's out, lse and gradients on them.
struct Reference {
  Tensor q, k, v, go, out, lse, gq, gk, gv;
};
Reference make_reference(const Case& c, std::uint64_t seed, const HalfFormat* format) {
  Reference r;
  r.q = Tensor::empty({c.b, c.hq, c.t, c.d});
  r.k = Tensor::empty({c.b, c.hkv, c.t, c.d});
  r.v = Tensor::empty({c.b, c.hkv, c.t, c.d});
  r.go = Tensor::empty({c.b, c.hq, c.t, c.d});
  std::uint64_t stream = 1;
  for (Tensor* t : {&r.q, &r.k, &r.v, &r.go}) {
    fill_uniform(*t, -1, 1, seed, stream++);
    if (format != nullptr) round_half(*t, *format);
  }
  r.out = Tensor::empty(r.q.shape());
  r.lse = Tensor::empty({c.b, c.hq, c.t});
  r.gq = Tensor::empty(r.q.shape());
  r.gk = Tensor::empty(r.k.shape());
  r.gv = Tensor::empty(r.v.shape());
  const AttentionArgs args{.causal = c.causal};
  attention_forward(args, r.q, r.k, r.v, r.out, r.lse);
  attention_backward(args, r.q, r.k, r.v, r.out, r.lse, r.go, r.gq, r.gk, r.gv);
  return r;
}

class FlashAttentionKernel : public ::testing::TestWithParam<Case> {};

TEST_P(FlashAttentionKernel, MatchesTheCpuOpInF32AndBf16) {
  MYRIAD_REQUIRE_GPU();
  const Case c = GetParam();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  for (bool bf16 : {false, true}) {
    const Reference r = make_reference(c, seed, bf16 ? &kBf16 : nullptr);
    const Tensor &q = r.q, &k = r.k, &v = r.v, &go = r.go, &out = r.out, &lse = r.lse, &gq = r.gq, &gk = r.gk,
                 &gv = r.gv;
    const cuda::FlashAttentionShape shape{c.b, c.hq, c.hkv, c.t, c.d, 0.0f, c.causal};
    const std::int64_t rows = c.b * c.hq * c.t;
    DeviceArray<float> dlse(context, rows), delta(context, rows);
    std::vector<double> got_out, got_gq, got_gk, got_gv;
    if (!bf16) {
      DeviceArray<float> dq(context, host(q)), dk(context, host(k)), dv(context, host(v)), dgo(context, host(go));
      DeviceArray<float> dout(context, q.numel()), dgq(context, q.numel()), dgk(context, k.numel()),
          dgv(context, v.numel());
      cuda::flash_attention_forward_f32(dq.get(), dk.get(), dv.get(), dout.get(), dlse.get(), shape, context.stream());
      cuda::flash_attention_backward_f32(dq.get(), dk.get(), dv.get(), dout.get(), dlse.get(), dgo.get(), dgq.get(),
                                         dgk.get(), dgv.get(), delta.get(), rows, shape, context.stream());
      got_out = as_f64(dout.download());
      got_gq = as_f64(dgq.download());
      got_gk = as_f64(dgk.download());
      got_gv = as_f64(dgv.download());
    } else {
      using B16 = __nv_bfloat16;
      DeviceArray<std::uint16_t> dq(context, to_bf16(q)), dk(context, to_bf16(k)), dv(context, to_bf16(v)),
          dgo(context, to_bf16(go));
      DeviceArray<std::uint16_t> dout(context, q.numel()), dgq(context, q.numel()), dgk(context, k.numel()),
          dgv(context, v.numel());
      auto p = [](const DeviceArray<std::uint16_t>& a) { return reinterpret_cast<B16*>(a.get()); };
      cuda::flash_attention_forward_bf16(p(dq), p(dk), p(dv), p(dout), dlse.get(), shape, context.stream());
      cuda::flash_attention_backward_bf16(p(dq), p(dk), p(dv), p(dout), dlse.get(), p(dgo), p(dgq), p(dgk), p(dgv),
                                          delta.get(), rows, shape, context.stream());
      got_out = from_bf16(dout.download());
      // The tensor-core forward: the same contract on the same inputs (its probabilities are
      // rounded to bf16 before P V, well inside the tolerance below).
      DeviceArray<std::uint16_t> tc_out(context, q.numel());
      DeviceArray<float> tc_lse(context, rows);
      cuda::flash_attention_forward_tc_bf16(p(dq), p(dk), p(dv), p(tc_out), tc_lse.get(), shape, context.stream());
      const std::string tc_what =
          "tensor-core T " + std::to_string(c.t) + " D " + std::to_string(c.d) + (c.causal ? " causal" : "");
      testing::expect_close(from_bf16(tc_out.download()), testing::to_f64(out), std::ldexp(1.0, -8),
                            std::ldexp(1.0, -8), "out " + tc_what);
      testing::expect_close(as_f64(tc_lse.download()), testing::to_f64(lse), 2e-5, 1e-5, "lse " + tc_what);
      // The tensor-core backward on the tensor-core forward's out and lse (as a 16-bit model would pair them).
      DeviceArray<std::uint16_t> tc_gq(context, q.numel()), tc_gk(context, k.numel()), tc_gv(context, v.numel());
      DeviceArray<float> tc_delta(context, rows);
      cuda::flash_attention_backward_tc_bf16(p(dq), p(dk), p(dv), p(tc_out), tc_lse.get(), p(dgo), p(tc_gq), p(tc_gk),
                                             p(tc_gv), tc_delta.get(), rows, shape, context.stream());
      const double tc_grad_atol = std::ldexp(1.0, -8) * std::sqrt(static_cast<double>(c.t));
      testing::expect_close(from_bf16(tc_gq.download()), testing::to_f64(gq), tc_grad_atol, std::ldexp(1.0, -8),
                            "grad_q " + tc_what);
      testing::expect_close(from_bf16(tc_gk.download()), testing::to_f64(gk), tc_grad_atol, std::ldexp(1.0, -8),
                            "grad_k " + tc_what);
      testing::expect_close(from_bf16(tc_gv.download()), testing::to_f64(gv), tc_grad_atol, std::ldexp(1.0, -8),
                            "grad_v " + tc_what);
      got_gq = from_bf16(dgq.download());
      got_gk = from_bf16(dgk.download());
      got_gv = from_bf16(dgv.download());
    }
    const double atol = bf16 ? std::ldexp(1.0, -8) : 2e-5, rtol = bf16 ? std::ldexp(1.0, -8) : 1e-4;
    const std::string what = std::string(bf16 ? "bf16" : "f32") + " T " + std::to_string(c.t) + " D " +
                             std::to_string(c.d) + " Hq/Hkv " + std::to_string(c.hq) + "/" + std::to_string(c.hkv) +
                             (c.causal ? " causal" : "");
    testing::expect_close(got_out, testing::to_f64(out), atol, rtol, "out " + what);
    testing::expect_close(as_f64(dlse.download()), testing::to_f64(lse), 2e-5, 1e-5, "lse " + what);
    // Gradients sum T terms: scale the absolute tolerance with sqrt(T).
    const double grad_atol = atol * std::sqrt(static_cast<double>(c.t));
    testing::expect_close(got_gq, testing::to_f64(gq), grad_atol, rtol, "grad_q " + what);
    testing::expect_close(got_gk, testing::to_f64(gk), grad_atol, rtol, "grad_k " + what);
    testing::expect_close(got_gv, testing::to_f64(gv), grad_atol, rtol, "grad_v " + what);
  }
}

std::vector<std::uint16_t> to_f16(const Tensor& t) { return to_half(t, kF16); }
std::vector<double> from_f16(const std::vector<std::uint16_t>& v) { return from_half(v, kF16); }

// The tensor-core kernels on f16 (training.precision fp16): forward, then the backward on its out
// and lse, against the CPU op on the f16-rounded inputs.
TEST_P(FlashAttentionKernel, TensorCoreF16MatchesTheCpuOp) {
  MYRIAD_REQUIRE_GPU();
  const Case c = GetParam();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  const Reference r = make_reference(c, seed, &kF16);
  const Tensor &q = r.q, &k = r.k, &v = r.v, &go = r.go, &out = r.out, &lse = r.lse, &gq = r.gq, &gk = r.gk, &gv = r.gv;
  const cuda::FlashAttentionShape shape{c.b, c.hq, c.hkv, c.t, c.d, 0.0f, c.causal};
  const std::int64_t rows = c.b * c.hq * c.t;
  DeviceArray<std::uint16_t> dq(context, to_f16(q)), dk(context, to_f16(k)), dv(context, to_f16(v)),
      dgo(context, to_f16(go));
  DeviceArray<std::uint16_t> dout(context, q.numel()), dgq(context, q.numel()), dgk(context, k.numel()),
      dgv(context, v.numel());
  DeviceArray<float> dlse(context, rows), delta(context, rows);
  auto p = [](const DeviceArray<std::uint16_t>& a) { return reinterpret_cast<__half*>(a.get()); };
  cuda::flash_attention_forward_tc_f16(p(dq), p(dk), p(dv), p(dout), dlse.get(), shape, context.stream());
  cuda::flash_attention_backward_tc_f16(p(dq), p(dk), p(dv), p(dout), dlse.get(), p(dgo), p(dgq), p(dgk), p(dgv),
                                        delta.get(), rows, shape, context.stream());
  const double tol = std::ldexp(1.0, -10), grad_atol = tol * std::sqrt(static_cast<double>(c.t));
  const std::string what =
      "f16 tensor-core T " + std::to_string(c.t) + " D " + std::to_string(c.d) + (c.causal ? " causal" : "");
  testing::expect_close(from_f16(dout.download()), testing::to_f64(out), tol, tol, "out " + what);
  testing::expect_close(as_f64(dlse.download()), testing::to_f64(lse), 2e-5, 1e-5, "lse " + what);
  testing::expect_close(from_f16(dgq.download()), testing::to_f64(gq), grad_atol, tol, "grad_q " + what);
  testing::expect_close(from_f16(dgk.download()), testing::to_f64(gk), grad_atol, tol, "grad_k " + what);
  testing::expect_close(from_f16(dgv.download()), testing::to_f64(gv), grad_atol, tol, "grad_v " + what);
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashAttentionKernel,
                         ::testing::Values(Case{1, 1, 1, 1, 64, true}, Case{2, 4, 2, 37, 64, true},
                                           Case{1, 4, 1, 100, 128, true}, Case{2, 2, 2, 65, 128, false},
                                           Case{1, 4, 4, 300, 64, false}, Case{1, 2, 1, 200, 128, true}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           const Case& c = info.param;
                           return "T" + std::to_string(c.t) + "_D" + std::to_string(c.d) + "_Hq" +
                                  std::to_string(c.hq) + "_Hkv" + std::to_string(c.hkv) +
                                  (c.causal ? "_causal" : "_full");
                         });

// The tensor-core kernels ask for 105-154 KB of shared memory per block. A GPU that lets a block
// opt into that (sm_80, sm_90) runs them; one that does not (sm_86 / sm_89: 99 KB) gets an error
// naming the launcher, the bytes and the device's limit instead of a failed launch.
TEST(FlashAttentionKernelValidation, TensorCoreKernelsRunOrNameTheSharedMemoryTheyNeed) {
  MYRIAD_REQUIRE_GPU();
  cuda::DeviceContext context(0);
  int limit = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, 0), cudaSuccess);
  const cuda::FlashAttentionShape shape{1, 2, 2, 64, 128, 0.0f, true};
  const std::int64_t n = 2 * 64 * 128;
  DeviceArray<std::uint16_t> q(context, n), k(context, n), v(context, n), out(context, n);
  DeviceArray<float> lse(context, 2 * 64);
  auto p = [](const DeviceArray<std::uint16_t>& a) { return reinterpret_cast<__nv_bfloat16*>(a.get()); };
  auto launch = [&] {
    cuda::flash_attention_forward_tc_bf16(p(q), p(k), p(v), p(out), lse.get(), shape, context.stream());
    context.synchronize();
  };
  try {
    launch();
  } catch (const Error& e) {  // a refusal must say why
    const std::string what = e.what();
    EXPECT_NE(what.find("flash_attention_forward_tc: needs"), std::string::npos) << what;
    EXPECT_NE(what.find("at most " + std::to_string(limit)), std::string::npos) << what;
    EXPECT_LT(limit, 200 * 1024) << "a Hopper-class limit must run the kernel: " << what;
  }
}

TEST(FlashAttentionKernelValidation, BadShapesAreRejected) {
  // NOLINTNEXTLINE(performance-no-int-to-ptr): fake device address, never dereferenced: argument checks fail first
  float* fake = reinterpret_cast<float*>(std::uintptr_t{256});
  expect_error_mentions(
      [&] {
        cuda::flash_attention_forward_f32(fake, fake, fake, fake, fake, {1, 4, 3, 8, 64, 0.0f, true}, nullptr);
      },
      {"flash_attention_forward_f32", "q_heads (4) must be a positive multiple of kv_heads (3)"});
  expect_error_mentions(
      [&] {
        cuda::flash_attention_forward_f32(fake, fake, fake, fake, fake, {1, 4, 4, 8, 96, 0.0f, true}, nullptr);
      },
      {"flash_attention_forward_f32", "head_dim 96 is not 64 or 128"});
}

}  // namespace
}  // namespace myriad
