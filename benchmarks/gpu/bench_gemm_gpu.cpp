// bench_gemm_gpu: myriad's cuBLASLt linear GEMM (cuda::linear_gemm) against calling cuBLAS
// directly (cublasGemmEx, same layout, same types, f32 accumulation) on the GPT-2 124M shapes,
// bf16 in and out: TFLOP/s of each and the ratio (bar: >= 95 %). Timing: CUDA events around 50
// calls after 10 warm-up calls, alternating the two paths 5 times and keeping each one's best
// round (so clock and thermal drift hit both). Prints "no CUDA device" and exits 0 without a GPU.
// --profile FILE merges into a machine profile (profile_file.h; the planner's calibration):
// precision bf16 and compute.matmul_flops_per_s = myriad's path over the five GPT-2 shapes
// together (FLOPs summed over times summed; forward GEMMs only: the backward's are the same sizes
// transposed, not timed here).
// A second table times cuBLAS alone on the shapes the planner's GEMM model is checked on (tensor-
// parallel shards, a small width, k 128, thin M), written as compute.gemm_sizes. A third (sm_89+)
// times myriad's FP8 GEMM (cuda::gemm, E4M3 x E4M3, f32 out) against cuBLAS bf16 on the model's shapes.
// Usage: bench_gemm_gpu [--profile FILE]
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "myriad/cuda/check.h"
#include "myriad/cuda/device_buffer.h"
#include "myriad/cuda/device_context.h"
#include "myriad/cuda/gemm.h"
#include "profile_file.h"

using namespace myriad;

namespace {

constexpr int kWarmup = 10, kCalls = 50, kRounds = 5;

template <typename Fn>
double time_calls(cudaStream_t stream, Fn&& fn) {
  cudaEvent_t start, stop;
  MYRIAD_CUDA_CHECK(cudaEventCreate(&start));
  MYRIAD_CUDA_CHECK(cudaEventCreate(&stop));
  MYRIAD_CUDA_CHECK(cudaEventRecord(start, stream));
  for (int i = 0; i < kCalls; ++i) fn();
  MYRIAD_CUDA_CHECK(cudaEventRecord(stop, stream));
  MYRIAD_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  MYRIAD_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  return ms / 1e3 / kCalls;
}

struct Shape {
  long m, n, k;
};

// Both paths warmed up, then timed in alternation for kRounds rounds: each one's best round.
template <typename Ours, typename Direct>
std::pair<double, double> best_alternating(cudaStream_t stream, Ours&& ours, Direct&& direct) {
  for (int i = 0; i < kWarmup; ++i) {
    ours();
    direct();
  }
  double best_ours = 1e30, best_direct = 1e30;
  for (int r = 0; r < kRounds; ++r) {
    best_ours = std::min(best_ours, time_calls(stream, ours));
    best_direct = std::min(best_direct, time_calls(stream, direct));
  }
  return {best_ours, best_direct};
}

// The bf16 operands of y = x W^T at one shape (x (m, k), W (n, k), y (m, n)), filled with 0x3c bytes.
struct Operands {
  cuda::DeviceBuffer x, w, y;
};

Operands operands(const cuda::DeviceContext& context, const Shape& s) {
  Operands o{cuda::DeviceBuffer(static_cast<std::size_t>(s.m * s.k) * 2, 0),
             cuda::DeviceBuffer(static_cast<std::size_t>(s.n * s.k) * 2, 0),
             cuda::DeviceBuffer(static_cast<std::size_t>(s.m * s.n) * 2, 0)};
  MYRIAD_CUDA_CHECK(cudaMemsetAsync(o.x.data(), 0x3c, o.x.bytes(), context.stream()));
  MYRIAD_CUDA_CHECK(cudaMemsetAsync(o.w.data(), 0x3c, o.w.bytes(), context.stream()));
  return o;
}

// The same product through cublasGemmEx directly (column-major: y^T = W x^T), f32 accumulation.
void cublas_gemm(cublasHandle_t cublas, const Shape& s, const Operands& o) {
  const float alpha = 1.0f, beta = 0.0f;
  MYRIAD_CUBLAS_CHECK(cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, static_cast<int>(s.n), static_cast<int>(s.m),
                                   static_cast<int>(s.k), &alpha, o.w.data(), CUDA_R_16BF, static_cast<int>(s.k),
                                   o.x.data(), CUDA_R_16BF, static_cast<int>(s.k), &beta, o.y.data(), CUDA_R_16BF,
                                   static_cast<int>(s.n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
}

}  // namespace

int main(int argc, char** argv) {
  std::string profile;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--profile") == 0 && i + 1 < argc) {
      profile = argv[++i];
    } else {
      std::fprintf(stderr, "usage: bench_gemm_gpu [--profile FILE]\n");
      return 2;
    }
  }
  if (!profile.empty() && !myriad::bench::profile_writable_or_report("bench_gemm_gpu", profile)) return 1;
  if (cuda::cuda_device_count_or_zero() == 0) {
    std::printf("bench_gemm_gpu: no CUDA device\n");
    return 0;
  }
  cuda::DeviceContext context(0);
  cudaDeviceProp prop{};
  MYRIAD_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  cublasHandle_t cublas = nullptr;
  MYRIAD_CUBLAS_CHECK(cublasCreate(&cublas));
  MYRIAD_CUBLAS_CHECK(cublasSetStream(cublas, context.stream()));
  MYRIAD_CUBLAS_CHECK(cublasSetWorkspace(cublas, context.workspace(), context.workspace_bytes()));
  std::printf(
      "# bench_gemm_gpu\n\n- device: %s (sm_%d%d)\n- y = x W^T, bf16 in/out, f32 accumulate; time = best of %d "
      "rounds of %d calls\n\n",
      prop.name, prop.major, prop.minor, kRounds, kCalls);
  std::printf("| M | N | K | myriad TFLOP/s | cuBLAS TFLOP/s | ratio |\n|---|---|---|---|---|---|\n");
  // GPT-2 124M at B 16 x T 1024: qkv, attention proj, MLP fc, MLP proj, LM head; plus a square.
  double model_flops = 0, model_seconds = 0;  // the five model shapes, myriad's path
  for (const Shape& s : {Shape{16384, 2304, 768}, Shape{16384, 768, 768}, Shape{16384, 3072, 768},
                         Shape{16384, 768, 3072}, Shape{16384, 50304, 768}, Shape{8192, 8192, 8192}}) {
    const Operands o = operands(context, s);
    const cuda::LinearGemm gemm{s.m, s.n, s.k, CUDA_R_16BF};
    auto ours = [&] { cuda::linear_gemm(context, gemm, o.x.data(), o.w.data(), nullptr, o.y.data()); };
    auto direct = [&] { cublas_gemm(cublas, s, o); };
    const auto [best_ours, best_direct] = best_alternating(context.stream(), ours, direct);
    const double flops = 2.0 * static_cast<double>(s.m) * s.n * s.k;
    if (s.m != s.n) {  // not the square
      model_flops += flops;
      model_seconds += best_ours;
    }
    std::printf("| %ld | %ld | %ld | %.1f | %.1f | %.1f%% |\n", s.m, s.n, s.k, flops / best_ours / 1e12,
                flops / best_direct / 1e12, 100.0 * best_direct / best_ours);
  }
  // The shapes the planner's GEMM model is checked on (python -m myriad.planner.validation --gemm-profile):
  // tensor-parallel shards of GPT-3 175B at one sequence of 2048 tokens (tp 8 and 4: qkv, proj, fc,
  // out), a 2304-wide model's GEMMs, an attention-like k 128 and a thin-M one; cuBLAS directly.
  nlohmann::json gemm_sizes = nlohmann::json::array();
  std::printf("\n| M | N | K | cuBLAS TFLOP/s (planner check) |\n|---|---|---|---|\n");
  for (const Shape& s :
       {Shape{2048, 4608, 12288}, Shape{2048, 12288, 1536}, Shape{2048, 6144, 12288}, Shape{2048, 12288, 6144},
        Shape{2048, 9216, 12288}, Shape{2048, 12288, 3072}, Shape{2048, 6912, 2304}, Shape{2048, 2304, 2304},
        Shape{2048, 2048, 128}, Shape{256, 4096, 4096}, Shape{4096, 4096, 4096}}) {
    const Operands o = operands(context, s);
    auto direct = [&] { cublas_gemm(cublas, s, o); };
    for (int i = 0; i < kWarmup; ++i) direct();
    double best = 1e30;
    for (int r = 0; r < kRounds; ++r) best = std::min(best, time_calls(context.stream(), direct));
    const double rate = 2.0 * static_cast<double>(s.m) * s.n * s.k / best;
    gemm_sizes.push_back({{"m", s.m}, {"n", s.n}, {"k", s.k}, {"flops_per_s", rate}, {"library", "cublasGemmEx bf16"}});
    std::printf("| %ld | %ld | %ld | %.1f |\n", s.m, s.n, s.k, rate / 1e12);
  }
  // FP8 (sm_89+): myriad's cuBLASLt FP8 GEMM (cuda::gemm, E4M3 x E4M3 in the "TN" layout, f32
  // out, as training.precision fp8's forward runs it) against cuBLAS bf16 on the same shapes
  // (cublasGemmEx takes no FP8: bf16 is the baseline an FP8 GEMM has to beat).
  if (prop.major * 10 + prop.minor >= 89) {
    std::printf("\n| M | N | K | myriad FP8 TFLOP/s | cuBLAS bf16 TFLOP/s | FP8 / bf16 |\n|---|---|---|---|---|---|\n");
    for (const Shape& s : {Shape{16384, 2304, 768}, Shape{16384, 768, 768}, Shape{16384, 3072, 768},
                           Shape{16384, 768, 3072}, Shape{8192, 8192, 8192}}) {
      const Operands o = operands(context, s);
      cuda::DeviceBuffer x8(static_cast<std::size_t>(s.m * s.k), 0), w8(static_cast<std::size_t>(s.n * s.k), 0);
      cuda::DeviceBuffer y32(static_cast<std::size_t>(s.m * s.n) * 4, 0);
      MYRIAD_CUDA_CHECK(cudaMemsetAsync(x8.data(), 0x38, x8.bytes(), context.stream()));  // E4M3 1.0
      MYRIAD_CUDA_CHECK(cudaMemsetAsync(w8.data(), 0x38, w8.bytes(), context.stream()));
      // The operands' dequantisation factors on the device, read by the GEMM, as the engine passes them.
      const float host_dequant[2] = {1.0f / 8.0f, 1.0f / 8.0f};
      cuda::DeviceBuffer dequant(sizeof host_dequant, 0);
      MYRIAD_CUDA_CHECK(
          cudaMemcpyAsync(dequant.data(), host_dequant, sizeof host_dequant, cudaMemcpyHostToDevice, context.stream()));
      const auto* factors = static_cast<const float*>(dequant.data());
      const cuda::Gemm fp8{.m = s.m,
                           .n = s.n,
                           .k = s.k,
                           .transpose_b = true,
                           .type = CUDA_R_8F_E4M3,
                           .b_type = CUDA_R_8F_E4M3,
                           .a_scale = factors,
                           .b_scale = factors + 1,
                           .output_type = CUDA_R_32F};
      auto ours = [&] { cuda::gemm(context, fp8, x8.data(), w8.data(), nullptr, y32.data()); };
      auto direct = [&] { cublas_gemm(cublas, s, o); };
      const auto [best_ours, best_direct] = best_alternating(context.stream(), ours, direct);
      const double flops = 2.0 * static_cast<double>(s.m) * s.n * s.k;
      std::printf("| %ld | %ld | %ld | %.1f | %.1f | %.2fx |\n", s.m, s.n, s.k, flops / best_ours / 1e12,
                  flops / best_direct / 1e12, best_direct / best_ours);
    }
  } else {
    std::printf("\nFP8: skipped (sm_%d%d; FP8 tensor cores need sm_89+)\n", prop.major, prop.minor);
  }
  (void)cublasDestroy(cublas);
  if (!profile.empty()) {
    const double rate = model_flops / model_seconds;
    bench::write_profile_parts(
        profile, "bench_gemm_gpu",
        {{"precision", "bf16"},
         {"compute.matmul_flops_per_s", rate},
         {"compute.matmul_shapes",
          "myriad cuda::linear_gemm forward, bf16 in/out, f32 accumulate, GPT-2 124M at "
          "M 16384: N K = 2304 768, 768 768, 3072 768, 768 3072, 50304 768; FLOPs summed "
          "over best-round times summed"},
         {"compute.gemm_sizes", gemm_sizes}},
        std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")",
        bench::joined_command_line(argc, argv));
    std::printf("\nprofile: %s (compute.matmul_flops_per_s %.1f TFLOP/s, bf16, merged)\n", profile.c_str(),
                rate / 1e12);
  }
  return 0;
}
