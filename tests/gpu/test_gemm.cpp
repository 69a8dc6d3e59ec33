// cuBLASLt linear GEMM (src/cuda/gemm.cpp) against a float64 reference on fresh random inputs:
// y = x W^T (+ bias) (then tanh-GELU) for f32, bf16 and f16, with and without accumulation into
// y, on odd and GPT-2 shapes. The reference uses the inputs as the GPU sees them (rounded to the
// type). Tolerance: f32 accumulation over K terms of magnitude <= 1 gives ~K * 6e-8 worst case,
// so atol 1e-5 * sqrt(K) + rtol 1e-5 for f32 outputs; 16-bit outputs add their own rounding
// (half an ulp: 2^-9 bf16, 2^-12 f16, relative), so rtol 4e-3 / 1e-3. Argument errors name the
// argument without touching the GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "gpu_test_support.h"
#include "myriad/core/half.h"
#include "myriad/core/philox.h"
#include "myriad/cuda/gemm.h"
#include "reference.h"

namespace myriad {
namespace {

using testing::DeviceArray;
using testing::expect_error_mentions;

double gelu(double x) { return 0.5 * x * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * (x + 0.044715 * x * x * x))); }

// Host values of `type` as 16-bit patterns or floats, and their float64 values.
struct Operand {
  std::vector<std::uint16_t> half;
  std::vector<float> single;
  std::vector<double> value;
};

Operand make_operand(std::int64_t count, cudaDataType_t type, std::uint64_t seed, std::uint64_t stream, float scale) {
  Tensor t = Tensor::empty({count});
  fill_uniform(t, -scale, scale, seed, stream);
  Operand o;
  for (std::int64_t i = 0; i < count; ++i) {
    const float v = t.data<float>()[i];
    if (type == CUDA_R_32F) {
      o.single.push_back(v);
      o.value.push_back(v);
    } else if (type == CUDA_R_16BF) {
      o.half.push_back(float_to_bf16(v));
      o.value.push_back(bf16_to_float(o.half.back()));
    } else {
      o.half.push_back(float_to_f16(v));
      o.value.push_back(f16_to_float(o.half.back()));
    }
  }
  return o;
}

// The three products of a linear layer's forward and backward through gemm(): every
// transposition pair, with and without accumulation, f32 exact and TF32 (10-bit mantissa
// products: relative error ~1e-3 per term, so atol 2e-3 * sqrt(K)).
TEST(Gemm, GeneralTranspositionsAndAccumulationMatchFloat64) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  const std::int64_t m = 45, n = 72, k = 96;
  for (bool transpose_a : {false, true}) {
    for (bool transpose_b : {false, true}) {
      for (bool accumulate : {false, true}) {
        for (bool tf32 : {false, true}) {
          const Operand a = make_operand(m * k, CUDA_R_32F, seed, 11, 1.0f);
          const Operand b = make_operand(k * n, CUDA_R_32F, seed, 12, 1.0f);
          const Operand c0 = make_operand(m * n, CUDA_R_32F, seed, 13, 1.0f);
          std::vector<double> expected(static_cast<std::size_t>(m * n));
          for (std::int64_t i = 0; i < m; ++i) {
            for (std::int64_t j = 0; j < n; ++j) {
              double acc = accumulate ? c0.value[i * n + j] : 0.0;
              for (std::int64_t p = 0; p < k; ++p) {
                const double av = transpose_a ? a.value[p * m + i] : a.value[i * k + p];
                const double bv = transpose_b ? b.value[j * k + p] : b.value[p * n + j];
                acc += av * bv;
              }
              expected[i * n + j] = acc;
            }
          }
          DeviceArray<float> da(context, a.single), db(context, b.single), dc(context, c0.single);
          cuda::gemm(context,
                     cuda::Gemm{.m = m,
                                .n = n,
                                .k = k,
                                .transpose_a = transpose_a,
                                .transpose_b = transpose_b,
                                .accumulate = accumulate,
                                .tf32 = tf32},
                     da.get(), db.get(), nullptr, dc.get());
          std::vector<double> got;
          for (float v : dc.download()) got.push_back(v);
          const double atol = (tf32 ? 2e-3 : 1e-5) * std::sqrt(static_cast<double>(k));
          testing::expect_close(got, expected, atol, tf32 ? 2e-3 : 1e-5,
                                std::string("transpose_a ") + (transpose_a ? "1" : "0") + " transpose_b " +
                                    (transpose_b ? "1" : "0") + (accumulate ? " accumulate" : "") +
                                    (tf32 ? " tf32" : ""));
        }
      }
    }
  }
}

// The plan cache (DeviceContext::gemm_plans): one shape on operands placed at every alignment
// from 16 to 256 bytes, each twice (the second call reuses the plan), with a bias epilogue whose
// pointer changes between calls. cuBLASLt is told the real alignment, so no call may fail or
// read wrongly; every result matches float64.
TEST(Gemm, PlansFollowPointerAlignmentAndBiasChanges) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  const std::int64_t m = 64, n = 128, k = 256, slack = 128;  // 128 bf16 = 256 bytes of room for offsets
  const Operand x = make_operand(m * k, CUDA_R_16BF, seed, 21, 1.0f);
  const Operand w = make_operand(n * k, CUDA_R_16BF, seed, 22, 1.0f);
  const Operand bias_a = make_operand(n, CUDA_R_32F, seed, 23, 1.0f),
                bias_b = make_operand(n, CUDA_R_32F, seed, 24, 1.0f);
  for (std::int64_t offset : {8, 16, 32, 64, 128}) {  // bf16 elements: 16 .. 256 bytes
    std::vector<std::uint16_t> x_host(static_cast<std::size_t>(m * k + slack)),
        w_host(static_cast<std::size_t>(n * k + slack));
    std::copy(x.half.begin(), x.half.end(), x_host.begin() + offset);
    std::copy(w.half.begin(), w.half.end(), w_host.begin() + offset);
    DeviceArray<std::uint16_t> dx(context, x_host), dw(context, w_host);
    DeviceArray<float> dy(context, m * n + 64), db_a(context, bias_a.single), db_b(context, bias_b.single);
    for (const Operand* bias : {&bias_a, &bias_b, &bias_a}) {
      const float* bias_ptr = bias == &bias_b ? db_b.get() : db_a.get();
      float* y = dy.get() + (offset % 64);  // f32 output at 16 .. 256-byte alignment too
      cuda::gemm(context,
                 cuda::Gemm{.m = m,
                            .n = n,
                            .k = k,
                            .transpose_b = true,
                            .type = CUDA_R_16BF,
                            .output_type = CUDA_R_32F,
                            .epilogue = cuda::GemmEpilogue::bias},
                 dx.get() + offset, dw.get() + offset, bias_ptr, y);
      std::vector<double> expected(static_cast<std::size_t>(m * n)), got;
      for (std::int64_t i = 0; i < m; ++i) {
        for (std::int64_t j = 0; j < n; ++j) {
          double acc = bias->value[j];
          for (std::int64_t p = 0; p < k; ++p) acc += x.value[i * k + p] * w.value[j * k + p];
          expected[i * n + j] = acc;
        }
      }
      const std::vector<float> all = dy.download();
      for (std::int64_t i = 0; i < m * n; ++i) got.push_back(all[static_cast<std::size_t>(offset % 64 + i)]);
      testing::expect_close(got, expected, 1e-5 * std::sqrt(static_cast<double>(k)), 1e-5,
                            "offset " + std::to_string(offset) + (bias == &bias_b ? " bias b" : " bias a"));
    }
  }
}

TEST(Gemm, LinearMatchesFloat64ForEveryTypeAndEpilogue) {
  MYRIAD_REQUIRE_GPU();
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  cuda::DeviceContext context(0);
  struct Shape {
    std::int64_t m, n, k;
  };
  for (cudaDataType_t type : {CUDA_R_32F, CUDA_R_16BF, CUDA_R_16F}) {
    for (const Shape& sh : {Shape{1, 8, 8}, Shape{37, 48, 64}, Shape{256, 768, 768}, Shape{128, 2304, 768}}) {
      for (cuda::GemmEpilogue epilogue :
           {cuda::GemmEpilogue::none, cuda::GemmEpilogue::bias, cuda::GemmEpilogue::bias_gelu}) {
        for (bool accumulate : {false, true}) {
          if (accumulate && epilogue != cuda::GemmEpilogue::none) continue;
          const Operand x = make_operand(sh.m * sh.k, type, seed, 1, 1.0f);
          const Operand w = make_operand(sh.n * sh.k, type, seed, 2, 1.0f / std::sqrt(static_cast<float>(sh.k)));
          const Operand b = make_operand(sh.n, type, seed, 3, 0.5f);
          const Operand y0 = make_operand(sh.m * sh.n, type, seed, 4, 1.0f);
          std::vector<double> expected(static_cast<std::size_t>(sh.m * sh.n));
          double largest_product = 0.0;  // max |x W^T| over the output
          for (std::int64_t i = 0; i < sh.m; ++i) {
            for (std::int64_t j = 0; j < sh.n; ++j) {
              double acc = 0.0;
              for (std::int64_t p = 0; p < sh.k; ++p) acc += x.value[i * sh.k + p] * w.value[j * sh.k + p];
              largest_product = std::max(largest_product, std::abs(acc));
              if (epilogue != cuda::GemmEpilogue::none) acc += b.value[j];
              if (epilogue == cuda::GemmEpilogue::bias_gelu) acc = gelu(acc);
              if (accumulate) acc += y0.value[i * sh.n + j];
              expected[i * sh.n + j] = acc;
            }
          }
          const cuda::LinearGemm gemm{sh.m, sh.n, sh.k, type, epilogue, accumulate};
          const bool bias = epilogue != cuda::GemmEpilogue::none;
          std::vector<double> got;
          if (type == CUDA_R_32F) {
            DeviceArray<float> dx(context, x.single), dw(context, w.single), db(context, b.single),
                dy(context, y0.single);
            cuda::linear_gemm(context, gemm, dx.get(), dw.get(), bias ? db.get() : nullptr, dy.get());
            for (float v : dy.download()) got.push_back(v);
          } else {
            DeviceArray<std::uint16_t> dx(context, x.half), dw(context, w.half), db(context, b.half),
                dy(context, y0.half);
            cuda::linear_gemm(context, gemm, dx.get(), dw.get(), bias ? db.get() : nullptr, dy.get());
            for (std::uint16_t v : dy.download())
              got.push_back(type == CUDA_R_16BF ? bf16_to_float(v) : f16_to_float(v));
          }
          // The GELU epilogue evaluates tanh with a fast approximation (relative error up to about
          // 2^-11, as PTX's tanh.approx.f32): gelu's 0.5 x tanh(...) term then carries up to
          // ~2.5e-4 |x|, far above f32 GEMM rounding, so that epilogue gets that margin on top.
          const bool fast_tanh = epilogue == cuda::GemmEpilogue::bias_gelu;
          const double rtol = (type == CUDA_R_32F    ? 1e-5
                               : type == CUDA_R_16BF ? 4e-3
                                                     : 1e-3) +
                              (fast_tanh ? 5e-4 : 0.0);
          // Accumulating into a 16-bit y: on the H200 (2026-12-04) cuBLASLt rounded x W^T to the
          // output type before adding y (errors up to half an ulp of |x W^T|, seen where the sum
          // cancels: 0.0018 at a result of 0.014), so that rounding is allowed on top.
          const double product_rounding =
              accumulate && type != CUDA_R_32F ? largest_product * (type == CUDA_R_16BF ? 0x1p-8 : 0x1p-11) : 0.0;
          testing::expect_close(got, expected,
                                1e-5 * std::sqrt(static_cast<double>(sh.k)) + (type == CUDA_R_32F ? 0 : 1e-3) +
                                    (fast_tanh ? 2.5e-4 : 0.0) + product_rounding,
                                rtol,
                                "type " + std::to_string(static_cast<int>(type)) + " M " + std::to_string(sh.m) +
                                    " N " + std::to_string(sh.n) + " K " + std::to_string(sh.k) + " epilogue " +
                                    std::to_string(static_cast<int>(epilogue)) + (accumulate ? " accumulate" : ""));
        }
      }
    }
  }
}

TEST(Gemm, BadArgumentsAreNamed) {
  MYRIAD_REQUIRE_GPU();
  cuda::DeviceContext context(0);
  DeviceArray<float> a(context, 64);
  expect_error_mentions(
      [&] {
        cuda::linear_gemm(context, {4, 4, -1, CUDA_R_32F}, a.get(), a.get(), nullptr, a.get());
      },
      {"linear_gemm", "K -1"});
  expect_error_mentions(
      [&] {
        cuda::linear_gemm(context, {4, 4, 4, CUDA_R_32F, cuda::GemmEpilogue::bias}, a.get(), a.get(), nullptr, a.get());
      },
      {"linear_gemm", "bias epilogue needs a bias"});
  expect_error_mentions(
      [&] {
        cuda::linear_gemm(context, {4, 4, 4, CUDA_R_8I}, a.get(), a.get(), nullptr, a.get());
      },
      {"linear_gemm", "not f32, bf16 or f16"});
}

}  // namespace
}  // namespace myriad
