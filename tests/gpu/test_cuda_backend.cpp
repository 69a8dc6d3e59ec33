// The CUDA backend against the CPU backend: every op it provides, called through the ops' own
// dispatch points on tensors a CudaBackend made, gives the CPU op's results on the same inputs —
// outputs written (`=`) and gradients accumulated (`+=`) into pre-filled buffers alike, for every
// transposition, batched layout and optional argument. Runs on a GPU (label gpu; skipped without
// one) and, in myriad_emulated_device_tests, on the emulated CUDA layer (the launchers replaced
// by the CPU ops), where it checks what the backend passes to them: pointers, sizes, flags.
#include <gtest/gtest.h>

#include <cstring>

#include <algorithm>
#include <cmath>
#include <functional>
#include <tuple>

#include "cuda_backend_fixture.h"
#include "myriad/cuda/device_tensor.h"
#include "myriad/core/half.h"
#include "myriad/ops/activations.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/fp8.h"
#include "myriad/ops/linear.h"
#include "myriad/ops/fp8.h"
#include "myriad/ops/matmul.h"
#include "myriad/ops/norms.h"
#include "reference.h"
#ifdef MYRIAD_EMULATED_CUDA
#include "emulated_streams.h"
#endif

namespace myriad {
namespace {

using testing::CudaBackendTest;
using testing::expect_error_mentions;

constexpr double kGemmTolerance = 2e-5;  // f32 products summed in another order (K <= 96)
constexpr double kRowTolerance = 1e-5;

// More uploads than the staging ring has slots, of growing and shrinking sizes, each from a
// temporary overwritten right after the call: every device tensor holds its own values. Emulated,
// the small ones are also seen not to wait for the stream (a real GPU reads the same values).
TEST_F(CudaBackendTest, SmallUploadsAreQueuedThroughPinnedStagingWithoutWaiting) {
  const std::vector<std::int64_t> sizes = {1, 5000, 17, 70000, 3, 300000, 9, 2, 131072, 33};
  std::vector<Tensor> device, expected;
#ifdef MYRIAD_EMULATED_CUDA
  const std::uint64_t waits_before = emulated::stream_synchronizations();
#endif
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    Tensor source = random({sizes[i]}, 100 + i);
    expected.push_back(source.clone());
    device.push_back(backend_->copy_from_host(source));
    fill_uniform(source, 5.0f, 6.0f, 7, i);  // the caller reuses its buffer at once
  }
#ifdef MYRIAD_EMULATED_CUDA
  EXPECT_EQ(emulated::stream_synchronizations(), waits_before) << "a small upload waited for the stream";
  backend_->copy_from_host(random({(4 << 20) / 4 + 1}, 99));  // over 4 MiB: the pageable copy, waited for
  EXPECT_EQ(emulated::stream_synchronizations(), waits_before + 1);
#endif
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    EXPECT_EQ(testing::to_f64(backend_->copy_to_host(device[i])), testing::to_f64(expected[i])) << "upload " << i;
  }
}

TEST_F(CudaBackendTest, TensorsNameTheirBackendAndRoundTrip) {
  const Tensor host = random({3, 5}, 1);
  const Tensor device = backend_->copy_from_host(host.permute({1, 0}));  // any strides in
  EXPECT_EQ(device.device(), Device::cuda(0));
  EXPECT_EQ(device.storage()->context(), backend_.get());
  EXPECT_EQ(testing::to_f64(backend_->copy_to_host(device)), testing::to_f64(host.permute({1, 0}).contiguous()));
  backend_->zero(device);
  for (double v : testing::to_f64(backend_->copy_to_host(device))) EXPECT_EQ(v, 0.0);
}

TEST_F(CudaBackendTest, MatmulEveryTranspositionWithWrittenAndAccumulatedResults) {
  const std::int64_t M = 7, K = 12, N = 9;
  for (bool ta : {false, true}) {
    for (bool tb : {false, true}) {
      for (bool accumulate : {false, true}) {
        SCOPED_TRACE(::testing::Message()
                     << "transpose_a " << ta << " transpose_b " << tb << " accumulate " << accumulate);
        const MatmulArgs args{.transpose_a = ta,
                              .transpose_b = tb,
                              .accumulate = accumulate,
                              .accumulate_grad_a = accumulate,
                              .accumulate_grad_b = !accumulate};
        const Tensor a = random(ta ? Shape{K, M} : Shape{M, K}, 2), b = random(tb ? Shape{N, K} : Shape{K, N}, 3);
        const Tensor g = random({M, N}, 4);
        Tensor out = random({M, N}, 5), grad_a = random(a.shape(), 6), grad_b = random(b.shape(), 7);
        Tensor d_out = on_device(out), d_grad_a = on_device(grad_a), d_grad_b = on_device(grad_b);
        matmul_forward(args, a, b, out);
        matmul_forward(args, on_device(a), on_device(b), d_out);
        expect_close(d_out, out, kGemmTolerance, "out");
        matmul_backward(args, a, b, g, grad_a, grad_b);
        matmul_backward(args, on_device(a), on_device(b), on_device(g), d_grad_a, d_grad_b);
        expect_close(d_grad_a, grad_a, kGemmTolerance, "grad_a");
        expect_close(d_grad_b, grad_b, kGemmTolerance, "grad_b");
      }
    }
  }
}

// 16-bit operands with f32 sums and outputs (cuBLASLt's bf16 / f16 paths): the CPU reference sums
// the same exact products, so only the summation order differs.
TEST_F(CudaBackendTest, MatmulWithSixteenBitOperands) {
  const std::int64_t M = 9, K = 64, N = 7;
  for (DType type : {DType::bf16, DType::f16}) {
    for (bool tb : {false, true}) {
      SCOPED_TRACE(std::string(dtype_name(type)) + (tb ? " transpose_b" : ""));
      const MatmulArgs args{.transpose_b = tb, .accumulate_grad_b = true};
      const Tensor a = random({2, M, K}, 80).to(type), b = random(tb ? Shape{N, K} : Shape{K, N}, 81).to(type);
      const Tensor g = random({2, M, N}, 82).to(type);
      Tensor out = Tensor::empty({2, M, N}), d_out = backend_->empty({2, M, N});
      matmul_forward(args, a, b, out);
      matmul_forward(args, on_device(a), on_device(b), d_out);
      expect_close(d_out, out, kGemmTolerance, "out");
      Tensor ga = Tensor::empty(a.shape()), gb = random(b.shape(), 83);
      Tensor d_ga = backend_->empty(a.shape()), d_gb = on_device(gb);
      matmul_backward(args, a, b, g, ga, gb);
      matmul_backward(args, on_device(a), on_device(b), on_device(g), d_ga, d_gb);
      expect_close(d_ga, ga, kGemmTolerance, "grad_a");
      expect_close(d_gb, gb, kGemmTolerance, "grad_b (+=, summed over the batch)");
    }
  }
}

// The GELU MLP's fused pair (cuBLASLt's GELU_AUX(_BIAS) and DGELU(_BGRAD) epilogues where F is a
// multiple of 8, the unfused kernels at F 12) against the CPU ops, f32 and bf16 operands.
TEST_F(CudaBackendTest, LinearGeluPairMatchesTheCpuOps) {
  const std::int64_t R = 40, K = 32, N = 24;
  for (std::int64_t F : {64, 12}) {
    for (DType type : {DType::f32, DType::bf16}) {
      for (bool with_bias : {true, false}) {
        SCOPED_TRACE("F " + std::to_string(F) + " " + std::string(dtype_name(type)) + (with_bias ? " bias" : ""));
        const Tensor x = random({R, K}, 100).to(type), w = random({F, K}, 101).to(type);
        const Tensor b = with_bias ? random({F}, 102) : Tensor();
        Tensor pre = Tensor::empty({R, F}), y = Tensor::empty({R, F});
        Tensor d_pre = backend_->empty({R, F}), d_y = backend_->empty({R, F});
        linear_gelu_forward(x, w, b, pre, y);
        linear_gelu_forward(on_device(x), on_device(w), on_device(b), d_pre, d_y);
        expect_close(d_pre, pre, kGemmTolerance, "pre_activation");
        expect_close(d_y, y, 1e-4, "y (the epilogue's GELU)");
        const Tensor g = random({R, N}, 103).to(type), w2 = random({N, F}, 104).to(type);
        Tensor grad_pre = Tensor::empty({R, F}), grad_bias = with_bias ? random({F}, 105) : Tensor();
        Tensor d_grad_pre = backend_->empty({R, F}), d_grad_bias = on_device(grad_bias);
        linear_dgelu_backward(g, w2, pre, grad_pre, grad_bias);
        linear_dgelu_backward(on_device(g), on_device(w2), on_device(pre), d_grad_pre, d_grad_bias);
        expect_close(d_grad_pre, grad_pre, 1e-4, "grad_pre");
        if (with_bias) expect_close(d_grad_bias, grad_bias, 1e-4, "grad_bias (+=)");
      }
    }
  }
}

// FP8: the quantisation kernel gives the CPU op's codes bit for bit (both round to nearest even
// and saturate), its transpose and its amax; cuBLASLt's FP8 GEMM (every allowed format pair,
// written and accumulated) equals the CPU GEMM of the same codes up to summation order. The
// sizes are multiples of 16, as cuBLASLt's FP8 kernels require.
TEST_F(CudaBackendTest, Fp8QuantizeAndGemmMatchTheCpuOps) {
  if (const std::string why = backend_->fp8_unavailable(); !why.empty()) GTEST_SKIP() << why;
  const std::int64_t M = 48, N = 32, K = 64;
  auto quantized = [&](const Tensor& x, DType format, float scale, Tensor& device_codes) {
    Tensor codes = Tensor::empty(x.shape(), format), codes_t = Tensor::empty({x.size(1), x.size(0)}, format);
    Tensor amax = Tensor::full({1}, 0.5), d_amax = on_device(amax);
    Tensor d_codes = backend_->empty(x.shape(), format), d_codes_t = backend_->empty(codes_t.shape(), format);
    const Tensor host_scale = Tensor::full({1}, scale);
    fp8_quantize(x, host_scale, codes, codes_t, amax);
    fp8_quantize(on_device(x), on_device(host_scale), d_codes, d_codes_t, d_amax);
    const Tensor got = backend_->copy_to_host(d_codes), got_t = backend_->copy_to_host(d_codes_t);
    EXPECT_EQ(std::memcmp(got.raw_data(), codes.raw_data(), codes.nbytes()), 0) << dtype_name(format) << " codes";
    EXPECT_EQ(std::memcmp(got_t.raw_data(), codes_t.raw_data(), codes.nbytes()), 0) << "transposed codes";
    EXPECT_EQ(backend_->copy_to_host(d_amax).data<float>()[0], amax.data<float>()[0]) << "amax";
    device_codes = d_codes;
    return codes;
  };
  Tensor x = random({M, K}, 90);
  x.data<float>()[3] = 1e4f;  // saturates
  Tensor d_a, d_b, d_g;
  const Tensor a = quantized(x, DType::f8e4m3, 200.0f, d_a);
  const Tensor b = quantized(random({N, K}, 91), DType::f8e4m3, 300.0f, d_b);
  const Tensor g = quantized(random({M, K}, 92), DType::f8e5m2, 1024.0f, d_g);
  const std::tuple<const Tensor*, const Tensor*, const Tensor*, const Tensor*> pairs[] = {
      {&a, &b, &d_a, &d_b}, {&g, &b, &d_g, &d_b}, {&b, &g, &d_b, &d_g}};
  for (const auto& [ha, hb, da, db] : pairs) {
    SCOPED_TRACE(std::string(dtype_name(ha->dtype())) + " x " + std::string(dtype_name(hb->dtype())));
    for (bool accumulate : {false, true}) {
      const Fp8GemmArgs args{.accumulate = accumulate};
      const Tensor a_dequant = Tensor::full({1}, 1.0 / 64), b_dequant = Tensor::full({1}, 1.0 / 32);
      Tensor out = random({ha->size(0), hb->size(0)}, 93), d_out = on_device(out);
      fp8_gemm(args, *ha, a_dequant, *hb, b_dequant, out);
      fp8_gemm(args, *da, on_device(a_dequant), *db, on_device(b_dequant), d_out);
      expect_close(d_out, out, kGemmTolerance, accumulate ? "out (+=)" : "out");
    }
  }
}

// The fused linear (bias / bias+GELU epilogues, or GELU after a plain GEMM) against the CPU's
// matmul + bias + GELU, with f32 operands and with bf16 / f16 ones (f32 y and bias).
TEST_F(CudaBackendTest, LinearWithFusedBiasAndGelu) {
  const Tensor x32 = random({3, 7, 64}, 90), w32 = random({48, 64}, 91), b = random({48}, 92);
  for (DType operands : {DType::f32, DType::bf16, DType::f16}) {
    const Tensor x = x32.to(operands), w = w32.to(operands);
    for (bool with_bias : {false, true}) {
      for (bool with_gelu : {false, true}) {
        SCOPED_TRACE(std::string(dtype_name(operands)) + (with_bias ? " bias" : " no bias") +
                     (with_gelu ? " gelu" : ""));
        Tensor y = Tensor::empty({3, 7, 48}), d_y = backend_->empty({3, 7, 48});
        linear_forward(LinearArgs{.gelu = with_gelu}, x, w, with_bias ? b : Tensor(), y);
        linear_forward(LinearArgs{.gelu = with_gelu}, on_device(x), on_device(w), with_bias ? on_device(b) : Tensor(),
                       d_y);
        // The GELU epilogue's fast tanh (see test_gemm.cpp) on top of the GEMM tolerance.
        expect_close(d_y, y, kGemmTolerance + (with_gelu ? 5e-4 : 0.0), "y");
      }
    }
  }
}

TEST_F(CudaBackendTest, MatmulBatchedShapesFoldedAndStrided) {
  const std::int64_t B = 3, M = 5, K = 8, N = 6;
  // A linear layer's (B, T, K) x (N, K)^T: folded into one GEMM; the shared weight's gradient
  // sums over the batch.
  {
    const MatmulArgs args{.transpose_b = true, .accumulate_grad_b = true};
    const Tensor x = random({B, M, K}, 10), w = random({N, K}, 11), g = random({B, M, N}, 12);
    Tensor y = Tensor::empty({B, M, N}), dx = Tensor::empty({B, M, K}), dw = random({N, K}, 13);
    Tensor d_y = backend_->empty({B, M, N}), d_dx = backend_->empty({B, M, K}), d_dw = on_device(dw);
    matmul_forward(args, x, w, y);
    matmul_forward(args, on_device(x), on_device(w), d_y);
    expect_close(d_y, y, kGemmTolerance, "linear y");
    matmul_backward(args, x, w, g, dx, dw);
    matmul_backward(args, on_device(x), on_device(w), on_device(g), d_dx, d_dw);
    expect_close(d_dx, dx, kGemmTolerance, "linear dx");
    expect_close(d_dw, dw, kGemmTolerance, "linear dw (+=)");
  }
  // Batched operands on both sides (attention-like), a transposed a, and a batch of a taken
  // from a permuted tensor (matrices contiguous, batch strides not): one GEMM per batch element.
  for (bool ta : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "transpose_a " << ta);
    const MatmulArgs args{.transpose_a = ta};
    const Tensor a_host = random(ta ? Shape{B, K, M} : Shape{B, M, K}, 21);
    const Tensor b = random({B, K, N}, 22), g = random({B, M, N}, 23);
    Tensor out = Tensor::empty({B, M, N}), grad_a = Tensor::empty(a_host.shape()), grad_b = Tensor::empty(b.shape());
    Tensor d_out = backend_->empty({B, M, N}), d_grad_a = backend_->empty(a_host.shape());
    Tensor d_grad_b = backend_->empty(b.shape());
    // The device's a: every matrix contiguous, the batch dim strided (the odd rows of a wider batch).
    const std::int64_t rows = a_host.size(1), cols = a_host.size(2);
    Tensor wide = backend_->empty({B, 2, rows, cols});
    Tensor d_a =
        Tensor::from_storage(wide.storage(), {B, rows, cols}, {2 * rows * cols, cols, 1}, rows * cols, DType::f32);
    const Tensor packed = backend_->copy_from_host(a_host);
    const std::size_t matrix_bytes = static_cast<std::size_t>(a_host.size(1) * a_host.size(2)) * sizeof(float);
    for (std::int64_t i = 0; i < B; ++i) {
      MYRIAD_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(d_a.raw_data()) + 2 * i * matrix_bytes,  // batch i
                                        static_cast<const char*>(packed.raw_data()) + i * matrix_bytes, matrix_bytes,
                                        cudaMemcpyDeviceToDevice, context_->stream()));
    }
    context_->synchronize();
    ASSERT_FALSE(d_a.is_contiguous());
    matmul_forward(args, a_host, b, out);
    matmul_forward(args, d_a, on_device(b), d_out);
    expect_close(d_out, out, kGemmTolerance, "batched out");
    matmul_backward(args, a_host, b, g, grad_a, grad_b);
    matmul_backward(args, d_a, on_device(b), on_device(g), d_grad_a, d_grad_b);
    expect_close(d_grad_a, grad_a, kGemmTolerance, "batched grad_a");
    expect_close(d_grad_b, grad_b, kGemmTolerance, "batched grad_b");
  }
}

TEST_F(CudaBackendTest, NormsWriteActivationsAndAccumulateParameterGradients) {
  const std::int64_t B = 2, T = 300, C = 40;  // 600 rows: more than one row group of the kernels
  const Tensor x = random({B, T, C}, 30), w = random({C}, 31), bias = random({C}, 32), g = random({B, T, C}, 33);
  for (bool with_bias : {true, false}) {
    SCOPED_TRACE(::testing::Message() << "bias " << with_bias);
    const Tensor b = with_bias ? bias : Tensor();
    Tensor out = Tensor::empty({B, T, C}), mean = Tensor::empty({B, T}), rstd = Tensor::empty({B, T});
    Tensor d_out = backend_->empty({B, T, C}), d_mean = backend_->empty({B, T}), d_rstd = backend_->empty({B, T});
    layernorm_forward(LayernormArgs{}, x, w, b, out, mean, rstd);
    layernorm_forward(LayernormArgs{}, on_device(x), on_device(w), on_device(b), d_out, d_mean, d_rstd);
    expect_close(d_out, out, kRowTolerance, "layernorm out");
    expect_close(d_rstd, rstd, kRowTolerance, "layernorm rstd");
    Tensor dx = Tensor::empty({B, T, C}), dw = random({C}, 34), db = with_bias ? random({C}, 35) : Tensor();
    Tensor d_dx = backend_->empty({B, T, C}), d_dw = on_device(dw), d_db = on_device(db);
    layernorm_backward(LayernormArgs{}, x, w, mean, rstd, g, dx, dw, db);
    layernorm_backward(LayernormArgs{}, on_device(x), on_device(w), d_mean, d_rstd, on_device(g), d_dx, d_dw, d_db);
    expect_close(d_dx, dx, kRowTolerance, "layernorm dx");
    expect_close(d_dw, dw, kRowTolerance, "layernorm dw (+=)");
    if (with_bias) expect_close(d_db, db, kRowTolerance, "layernorm db (+=)");
  }
  Tensor out = Tensor::empty({B, T, C}), rstd = Tensor::empty({B * T});
  Tensor d_out = backend_->empty({B, T, C}), d_rstd = backend_->empty({B * T});
  rmsnorm_forward(RmsnormArgs{.eps = 1e-6f}, x, w, out, rstd);
  rmsnorm_forward(RmsnormArgs{.eps = 1e-6f}, on_device(x), on_device(w), d_out, d_rstd);
  expect_close(d_out, out, kRowTolerance, "rmsnorm out");
  Tensor dx = Tensor::empty({B, T, C}), dw = random({C}, 36), none, d_none;
  Tensor d_dx = backend_->empty({B, T, C}), d_dw = on_device(dw);
  rmsnorm_backward(RmsnormArgs{.eps = 1e-6f}, x, w, rstd, g, dx, dw);
  rmsnorm_backward(RmsnormArgs{.eps = 1e-6f}, on_device(x), on_device(w), d_rstd, on_device(g), d_dx, d_dw);
  expect_close(d_dx, dx, kRowTolerance, "rmsnorm dx");
  expect_close(d_dw, dw, kRowTolerance, "rmsnorm dw (+=)");
}

TEST_F(CudaBackendTest, ActivationsMatchInPlaceAndWithSkippedGradients) {
  const Tensor x = random({4, 37}, 40), up = random({4, 37}, 41), g = random({4, 37}, 42);
  Tensor out = Tensor::empty({4, 37}), dx = Tensor::empty({4, 37});
  gelu_forward(GeluArgs{}, x, out);
  Tensor d_x = on_device(x);
  gelu_forward(GeluArgs{}, d_x, d_x);  // in place
  expect_close(d_x, out, kRowTolerance, "gelu (in place)");
  gelu_backward(GeluArgs{}, x, g, dx);
  Tensor d_g = on_device(g);
  gelu_backward(GeluArgs{}, on_device(x), d_g, d_g);
  expect_close(d_g, dx, kRowTolerance, "gelu backward (in place)");
  swiglu_forward(SwigluArgs{}, x, up, out);
  Tensor d_out = backend_->empty({4, 37});
  swiglu_forward(SwigluArgs{}, on_device(x), on_device(up), d_out);
  expect_close(d_out, out, kRowTolerance, "swiglu");
  Tensor d_gate = Tensor::empty({4, 37}), d_up = Tensor::empty({4, 37}), skipped;
  swiglu_backward(SwigluArgs{}, x, up, g, d_gate, d_up);
  Tensor dd_gate = backend_->empty({4, 37}), dd_up = backend_->empty({4, 37});
  swiglu_backward(SwigluArgs{}, on_device(x), on_device(up), on_device(g), dd_gate, skipped);
  expect_close(dd_gate, d_gate, kRowTolerance, "swiglu grad_gate");
  swiglu_backward(SwigluArgs{}, on_device(x), on_device(up), on_device(g), skipped, dd_up);
  expect_close(dd_up, d_up, kRowTolerance, "swiglu grad_up");
}

TEST_F(CudaBackendTest, ScaledSumsCopiesConversionsAndZero) {
  const Tensor a = random({5, 33}, 60), b = random({5, 33}, 61), g = random({5, 33}, 62);
  const AddArgs args{.alpha = 0.5f, .beta = -3.0f};
  Tensor out = Tensor::empty({5, 33}), d_out = backend_->empty({5, 33});
  add_forward(args, a, b, out);
  add_forward(args, on_device(a), on_device(b), d_out);
  expect_close(d_out, out, 1e-6, "alpha a + beta b");
  Tensor d_b = on_device(b);
  add_forward(args, on_device(a), d_b, d_b);
  expect_close(d_b, out, 1e-6, "in place");
  add_forward(args, a, Tensor(), out);
  add_forward(args, on_device(a), Tensor(), d_out);
  expect_close(d_out, out, 1e-6, "scale");
  const Tensor start = random({5, 33}, 63);
  Tensor ga = Tensor::empty({5, 33}), gb = start.clone(), d_ga = backend_->empty({5, 33}), d_gb = on_device(start);
  const AddArgs acc{.alpha = 0.5f, .beta = -3.0f, .accumulate_grads = true};
  add_backward(acc, g, ga, gb);
  Tensor d_g = on_device(g);
  add_backward(acc, d_g, d_ga, d_gb);
  expect_close(d_gb, gb, 1e-6, "grad_b +=");
  // Conversions: the kernels round as core/half.h does; bf16 <-> f16 through f32.
  for (DType half : {DType::bf16, DType::f16}) {
    Tensor h = Tensor::empty({5, 33}, half), back = Tensor::empty({5, 33});
    copy(a, h);
    copy(h, back);
    Tensor d_h = backend_->empty({5, 33}, half), d_back = backend_->empty({5, 33});
    copy(on_device(a), d_h);
    copy(d_h, d_back);
    expect_close(d_back, back, 0.0, "f32 -> half -> f32");
  }
  Tensor via = Tensor::empty({5, 33}, DType::f16), d_via = backend_->empty({5, 33}, DType::f16);
  Tensor bf = Tensor::empty({5, 33}, DType::bf16);
  copy(a, bf);
  copy(bf, via);
  copy(on_device(bf), d_via);
  EXPECT_EQ(testing::to_f64(backend_->copy_to_host(d_via)), testing::to_f64(via));
  // Gathering the heads of packed rows (both head orders) into contiguous tensors.
  const Tensor rows = random({2, 7, 40}, 64);
  const Tensor d_rows = on_device(rows);
  for (bool heads_major : {true, false}) {
    const auto view = [&](const Tensor& packed) {
      Tensor bthd =
          Tensor::from_storage(packed.storage(), {2, 7, 3, 8}, {7 * 40, 40, 8, 1}, packed.offset() + 8, DType::f32);
      return heads_major ? bthd.permute({0, 2, 1, 3}) : bthd;
    };
    const Tensor src = view(rows), d_src = view(d_rows);
    Tensor dst = Tensor::empty(src.shape()), d_dst = backend_->empty(src.shape());
    copy(src, dst);
    copy(d_src, d_dst);
    expect_close(d_dst, dst, 0.0, heads_major ? "heads of rows" : "rows of heads");
  }
  Tensor d_z = on_device(a);
  zero(d_z);
  for (double v : testing::to_f64(backend_->copy_to_host(d_z))) EXPECT_EQ(v, 0.0);
  fill(d_z, 0.125f);
  for (double v : testing::to_f64(backend_->copy_to_host(d_z))) EXPECT_EQ(v, 0.125);
}

TEST_F(CudaBackendTest, RoundToFormatGivesTheCpuRounding) {
  for (DType format : {DType::bf16, DType::f16}) {
    Tensor x = random({5, 33}, 60);
    for (std::int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] *= 1e3f;
    x.data<float>()[7] = 1e6f;  // f16 saturates to infinity
    Tensor d_x = on_device(x);
    round_to_format(x, format);
    round_to_format(d_x, format);
    const Tensor got = backend_->copy_to_host(d_x);
    EXPECT_EQ(std::memcmp(got.raw_data(), x.raw_data(), x.nbytes()), 0) << (format == DType::bf16 ? "bf16" : "f16");
  }
}

TEST_F(CudaBackendTest, UnsupportedLayoutsAndForeignMemoryAreRefusedNamingTheTensor) {
  const Tensor a = on_device(random({4, 6}, 50)), b = on_device(random({6, 4}, 51));
  Tensor out = backend_->empty({4, 4});
  expect_error_mentions([&] { matmul_forward(MatmulArgs{.alpha = 0.5f}, a, b, out); }, {"matmul_forward", "alpha 0.5"});
  const Tensor column_major = b.permute({1, 0});  // (4, 6) with strides [1, 4]
  Tensor out2 = backend_->empty({4, 4});
  expect_error_mentions([&] { matmul_forward(MatmulArgs{.transpose_b = true}, a, column_major, out2); },
                        {"matmul_forward on cuda:0", "'b'", "row-major"});
  // A second backend on the same device: its tensors cannot be mixed with the first one's.
  cuda::CudaBackend other(*context_);
  Tensor foreign_out = other.empty({4, 4});
  expect_error_mentions([&] { matmul_forward(MatmulArgs{}, a, b, foreign_out); },
                        {"matmul_forward", "'out' and 'a' belong to different backends"});
  // Device memory no backend made (a view of a raw buffer).
  Tensor raw = cuda::view_device_floats(*context_, out.data<float>(), {4, 4});
  expect_error_mentions([&] { matmul_forward(MatmulArgs{}, a, b, raw); },
                        {"matmul_forward", "'out'", "no compute backend made"});
}

}  // namespace
}  // namespace myriad
