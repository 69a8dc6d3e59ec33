// Flash attention kernels (kernels/attention/: the CUDA-core f32 / bf16 and the tensor-core bf16 /
// f16 launchers) beyond dense self-attention, against the CPU op (ops/attention.h) on the same
// (rounded) inputs: block-sparse layouts shared by every head and one per (batch, head) with rows
// that keep no block, global offsets with k / v of another row count than q, rows that see no key
// (out 0, lse -inf, finite zero gradients), and gradients accumulated into. Layout blocks are 64
// rows, which both kernel families tile (32 and 64 query rows per block). Device only (no
// emulation: there the launchers are the CPU op itself).
//
// Tolerances are test_flash_attention.cpp's: f32 atol 2e-5, rtol 1e-4; bf16 2^-8 (half an ulp of
// the output rounding, 2^-9, twice); f16 2^-10; gradients' atol times sqrt(Tk) (sums of Tk
// terms); lse 2e-5 / 1e-5 with -inf required exactly where the CPU has it.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gpu_test_support.h"
#include "myriad/core/half.h"
#include "myriad/core/philox.h"
#include "myriad/cuda/kernels.h"
#include "myriad/ops/attention.h"
#include "myriad/ops/block_layout.h"
#include "reference.h"

namespace myriad {
namespace {

using testing::as_f64;
using testing::DeviceArray;

enum class Kernel { f32, bf16, tc_bf16, tc_f16 };

struct SparseCase {
  std::string name;
  std::int64_t b, hq, hkv, tq, tk, d;
  std::int64_t q_offset = 0, k_offset = 0;
  bool causal = true;
  int layout = 0;  // 0: dense, 1: a fixed pattern for every head, 2: random, one per (batch, head)
  bool accumulate = false;
};

constexpr std::int64_t kBlock = 64;

BlockLayout make_layout(const SparseCase& c) {
  const std::int64_t positions = std::max(c.q_offset + c.tq, c.k_offset + c.tk);
  if (c.layout == 1) {
    return fixed_block_layout(FixedBlockPattern{.local_blocks = 1, .global_blocks = 1, .stride_blocks = 2}, positions,
                              kBlock);
  }
  BlockLayout layout;
  layout.block_size = kBlock;
  layout.query_blocks = blocks_covering(positions, kBlock);
  layout.sets = c.b * c.hq;
  std::mt19937 rng(11);
  for (std::int64_t s = 0; s < layout.sets; ++s) {
    for (std::int64_t qb = 0; qb < layout.query_blocks; ++qb) {
      if ((s + qb) % 5 != 3) {  // every fifth row keeps nothing
        for (std::int64_t kb = 0; kb < (c.causal ? qb + 1 : layout.query_blocks); ++kb) {
          if (kb == qb || rng() % 2 == 0) layout.key_blocks.push_back(static_cast<std::int32_t>(kb));
        }
      }
      layout.row_begin.push_back(layout.kept_blocks());
    }
  }
  return layout;
}

std::uint16_t narrow(Kernel k, float x) { return k == Kernel::tc_f16 ? float_to_f16(x) : float_to_bf16(x); }
float widen(Kernel k, std::uint16_t x) { return k == Kernel::tc_f16 ? f16_to_float(x) : bf16_to_float(x); }

// -inf (a row that saw no key) as a finite stand-in both sides share, so expect_close can compare.
std::vector<double> lse_values(std::vector<double> v) {
  for (double& x : v) x = std::isinf(x) && x < 0 ? -1e30 : x;
  return v;
}

// Device buffers of one kernel's element type (f32, or 16-bit patterns).
struct Buffers {
  Kernel kernel;
  const cuda::DeviceContext& context;
  bool wide() const { return kernel == Kernel::f32; }
  std::vector<float> as_float(const Tensor& t) const { return {t.data<float>(), t.data<float>() + t.numel()}; }
  std::vector<std::uint16_t> as_half(const Tensor& t) const {
    std::vector<std::uint16_t> out;
    for (std::int64_t i = 0; i < t.numel(); ++i) out.push_back(narrow(kernel, t.data<float>()[i]));
    return out;
  }
};

void run_case(const SparseCase& c, Kernel kernel) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  const bool half = kernel != Kernel::f32;
  // Inputs in [-1, 1], rounded to the kernel's type: the values it sees.
  Tensor q = Tensor::empty({c.b, c.hq, c.tq, c.d}), k = Tensor::empty({c.b, c.hkv, c.tk, c.d});
  Tensor v = Tensor::empty(k.shape()), go = Tensor::empty(q.shape());
  Tensor gq = Tensor::zeros(q.shape()), gk = Tensor::zeros(k.shape()), gv = Tensor::zeros(k.shape());
  std::uint64_t stream = 1;
  for (Tensor* t : {&q, &k, &v, &go, &gq, &gk, &gv}) {
    if (!c.accumulate && (t == &gq || t == &gk || t == &gv)) continue;
    fill_uniform(*t, -1, 1, seed, stream++);
    if (half) {
      float* x = t->data<float>();
      for (std::int64_t i = 0; i < t->numel(); ++i) x[i] = widen(kernel, narrow(kernel, x[i]));
    }
  }
  const BlockLayout layout = c.layout != 0 ? make_layout(c) : BlockLayout{};
  const AttentionArgs args{.causal = c.causal,
                           .q_offset = c.q_offset,
                           .k_offset = c.k_offset,
                           .layout = c.layout != 0 ? &layout : nullptr,
                           .accumulate = c.accumulate};
  Tensor out = Tensor::empty(q.shape()), lse = Tensor::empty({c.b, c.hq, c.tq});
  attention_forward(args, q, k, v, out, lse);
  const Tensor gq0 = gq.clone(), gk0 = gk.clone(), gv0 = gv.clone();  // before the CPU adds
  attention_backward(args, q, k, v, out, lse, go, gq, gk, gv);

  DeviceArray<std::int64_t> row_begin(context, c.layout != 0 ? layout.row_begin : std::vector<std::int64_t>{0});
  std::vector<std::int32_t> kept = layout.key_blocks;
  if (kept.empty()) kept.push_back(0);
  DeviceArray<std::int32_t> key_blocks(context, kept);
  cuda::FlashAttentionShape shape{c.b, c.hq, c.hkv, c.tq, c.d, 0.0f, c.causal};
  shape.k_seq = c.tk;
  shape.q_offset = c.q_offset;
  shape.k_offset = c.k_offset;
  shape.accumulate = c.accumulate;
  if (c.layout != 0) {
    shape.layout = cuda::FlashAttentionLayout{.row_begin = row_begin.get(),
                                              .key_blocks = key_blocks.get(),
                                              .block_size = layout.block_size,
                                              .query_blocks = layout.query_blocks,
                                              .sets = layout.sets};
  }
  const std::int64_t rows = c.b * c.hq * c.tq;
  DeviceArray<float> dlse(context, rows), delta(context, rows);
  std::vector<double> got_out, got_gq, got_gk, got_gv;
  const Buffers buffers{kernel, context};
  if (!half) {
    DeviceArray<float> dq(context, buffers.as_float(q)), dk(context, buffers.as_float(k)),
        dv(context, buffers.as_float(v)), dgo(context, buffers.as_float(go)), dout(context, q.numel());
    DeviceArray<float> dgq(context, buffers.as_float(gq0)), dgk(context, buffers.as_float(gk0)),
        dgv(context, buffers.as_float(gv0));
    cuda::flash_attention_forward_f32(dq.get(), dk.get(), dv.get(), dout.get(), dlse.get(), shape, context.stream());
    cuda::flash_attention_backward_f32(dq.get(), dk.get(), dv.get(), dout.get(), dlse.get(), dgo.get(), dgq.get(),
                                       dgk.get(), dgv.get(), delta.get(), rows, shape, context.stream());
    got_out = as_f64(dout.download());
    got_gq = as_f64(dgq.download());
    got_gk = as_f64(dgk.download());
    got_gv = as_f64(dgv.download());
  } else {
    DeviceArray<std::uint16_t> dq(context, buffers.as_half(q)), dk(context, buffers.as_half(k)),
        dv(context, buffers.as_half(v)), dgo(context, buffers.as_half(go)), dout(context, q.numel());
    DeviceArray<std::uint16_t> dgq(context, buffers.as_half(gq0)), dgk(context, buffers.as_half(gk0)),
        dgv(context, buffers.as_half(gv0));
    const auto bf = [](const DeviceArray<std::uint16_t>& a) { return reinterpret_cast<__nv_bfloat16*>(a.get()); };
    const auto hf = [](const DeviceArray<std::uint16_t>& a) { return reinterpret_cast<__half*>(a.get()); };
    if (kernel == Kernel::bf16) {
      cuda::flash_attention_forward_bf16(bf(dq), bf(dk), bf(dv), bf(dout), dlse.get(), shape, context.stream());
      cuda::flash_attention_backward_bf16(bf(dq), bf(dk), bf(dv), bf(dout), dlse.get(), bf(dgo), bf(dgq), bf(dgk),
                                          bf(dgv), delta.get(), rows, shape, context.stream());
    } else if (kernel == Kernel::tc_bf16) {
      cuda::flash_attention_forward_tc_bf16(bf(dq), bf(dk), bf(dv), bf(dout), dlse.get(), shape, context.stream());
      cuda::flash_attention_backward_tc_bf16(bf(dq), bf(dk), bf(dv), bf(dout), dlse.get(), bf(dgo), bf(dgq), bf(dgk),
                                             bf(dgv), delta.get(), rows, shape, context.stream());
    } else {
      cuda::flash_attention_forward_tc_f16(hf(dq), hf(dk), hf(dv), hf(dout), dlse.get(), shape, context.stream());
      cuda::flash_attention_backward_tc_f16(hf(dq), hf(dk), hf(dv), hf(dout), dlse.get(), hf(dgo), hf(dgq), hf(dgk),
                                            hf(dgv), delta.get(), rows, shape, context.stream());
    }
    const auto wide = [&](const DeviceArray<std::uint16_t>& a) {
      std::vector<double> out;
      for (std::uint16_t x : a.download()) out.push_back(widen(kernel, x));
      return out;
    };
    got_out = wide(dout);
    got_gq = wide(dgq);
    got_gk = wide(dgk);
    got_gv = wide(dgv);
  }
  const double tol =
      kernel == Kernel::f32 ? 2e-5 : (kernel == Kernel::tc_f16 ? std::ldexp(1.0, -10) : std::ldexp(1.0, -8));
  const double rtol = kernel == Kernel::f32 ? 1e-4 : tol;
  const double grad_atol = tol * std::sqrt(static_cast<double>(std::max<std::int64_t>(c.tk, 1)));
  const std::string what = c.name + " kernel " + std::to_string(static_cast<int>(kernel));
  testing::expect_close(got_out, testing::to_f64(out), tol, rtol, "out " + what);
  testing::expect_close(lse_values(as_f64(dlse.download())), lse_values(testing::to_f64(lse)), 2e-5, 1e-5,
                        "lse " + what);
  testing::expect_close(got_gq, testing::to_f64(gq), grad_atol, rtol, "grad_q " + what);
  testing::expect_close(got_gk, testing::to_f64(gk), grad_atol, rtol, "grad_k " + what);
  testing::expect_close(got_gv, testing::to_f64(gv), grad_atol, rtol, "grad_v " + what);
}

class FlashAttentionSparseKernel : public ::testing::TestWithParam<SparseCase> {};

TEST_P(FlashAttentionSparseKernel, EveryKernelMatchesTheCpuOp) {
  MYRIAD_REQUIRE_GPU();
  for (Kernel kernel : {Kernel::f32, Kernel::bf16, Kernel::tc_bf16, Kernel::tc_f16}) {
    SCOPED_TRACE(::testing::Message() << "kernel " << static_cast<int>(kernel));
    run_case(GetParam(), kernel);
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cases, FlashAttentionSparseKernel,
    ::testing::Values(
        SparseCase{.name = "fixed_T200", .b = 1, .hq = 4, .hkv = 2, .tq = 200, .tk = 200, .d = 64, .layout = 1},
        SparseCase{.name = "per_head_causal", .b = 2, .hq = 2, .hkv = 1, .tq = 256, .tk = 256, .d = 64, .layout = 2},
        SparseCase{.name = "per_head_full",
                   .b = 2,
                   .hq = 2,
                   .hkv = 1,
                   .tq = 256,
                   .tk = 256,
                   .d = 128,
                   .causal = false,
                   .layout = 2},
        SparseCase{.name = "later_queries", .b = 1, .hq = 2, .hkv = 2, .tq = 100, .tk = 150, .d = 64, .q_offset = 120},
        SparseCase{
            .name = "keys_after_queries", .b = 1, .hq = 2, .hkv = 1, .tq = 70, .tk = 45, .d = 64, .k_offset = 40},
        SparseCase{.name = "cross_full",
                   .b = 1,
                   .hq = 2,
                   .hkv = 1,
                   .tq = 33,
                   .tk = 90,
                   .d = 128,
                   .q_offset = 7,
                   .k_offset = 3,
                   .causal = false},
        SparseCase{.name = "layout_offsets",
                   .b = 1,
                   .hq = 2,
                   .hkv = 1,
                   .tq = 128,
                   .tk = 192,
                   .d = 64,
                   .q_offset = 192,
                   .k_offset = 64,
                   .layout = 1},
        SparseCase{.name = "accumulate",
                   .b = 1,
                   .hq = 2,
                   .hkv = 1,
                   .tq = 128,
                   .tk = 192,
                   .d = 64,
                   .q_offset = 64,
                   .layout = 2,
                   .accumulate = true}),
    [](const ::testing::TestParamInfo<SparseCase>& info) { return info.param.name; });

}  // namespace
}  // namespace myriad
