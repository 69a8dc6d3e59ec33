// bench_attention_gpu: myriad's flash attention kernels (bf16 tensors, f32 softmax) in TFLOP/s,
// forward and forward + backward, for the CUDA-core kernels (flash_attention_*_bf16) and the
// tensor-core ones (flash_attention_*_tc_bf16, WMMA) and cuDNN's fused attention as the engine's
// 16-bit attention calls it (cuda/cudnn_attention.h; "-" with the reason where this build or GPU
// has none), at T = 1k, 2k, 4k (--long: up to 16k), head
// dim 64 and 128, causal and not (batch * heads chosen so every shape does about the same work).
// FLOPs counted as FlashAttention's benchmarks do: forward 4 B H T^2 D (halved when causal),
// backward 2.5x the forward. With `--sdpa FILE` it reads PyTorch SDPA timings for the same shapes
// (written by benchmarks/gpu/sdpa_reference.py on the same GPU) and prints the tensor-core and cuDNN
// ratios — the bar is >= 95 % of SDPA for forward + backward at T >= 2048, D 128. Time = best of
// 2 rounds of 3 calls (CUDA events). Exits 0 without a GPU.
// --profile FILE merges compute.attention_flops_per_s into a machine profile (profile_file.h):
// the kernels the engine runs (flash_attention_*_f32, CUDA cores, f32 tensors:
// cuda_backend_model_ops.cpp), forward + backward at T 2048, D 128, causal, 16 heads, batch 8, with
// the shape in compute.attention_shape.
// Usage: bench_attention_gpu [--sdpa sdpa.txt] [--long] [--profile FILE]
#include <cuda_bf16.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <tuple>

#include "myriad/cuda/check.h"
#include "myriad/cuda/device_buffer.h"
#include "myriad/cuda/device_context.h"
#include "myriad/cuda/cudnn_attention.h"
#include "myriad/cuda/kernels.h"
#include "profile_file.h"

using namespace myriad;

namespace {

using Key = std::tuple<long, long, int>;  // T, D, causal

template <typename Fn>
double best_seconds(cudaStream_t stream, Fn&& fn) {
  cudaEvent_t start, stop;
  MYRIAD_CUDA_CHECK(cudaEventCreate(&start));
  MYRIAD_CUDA_CHECK(cudaEventCreate(&stop));
  double best = 1e30;
  fn();  // warm-up
  for (int round = 0; round < 2; ++round) {
    MYRIAD_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int i = 0; i < 3; ++i) fn();
    MYRIAD_CUDA_CHECK(cudaEventRecord(stop, stream));
    MYRIAD_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0;
    MYRIAD_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    best = std::min(best, ms / 1e3 / 3);
  }
  (void)cudaEventDestroy(start);
  (void)cudaEventDestroy(stop);
  return best;
}

// Lines "T D causal forward_seconds forward_backward_seconds" from sdpa_reference.py.
std::map<Key, std::pair<double, double>> read_sdpa(const char* path) {
  std::map<Key, std::pair<double, double>> table;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    long t, d;
    int causal;
    double fwd, both;
    if (fields >> t >> d >> causal >> fwd >> both) table[{t, d, causal}] = {fwd, both};
  }
  return table;
}

// The tensors of one attention problem: q, k, v, out, grad_out and the three gradients of
// batch x heads x t x d elements of `element_bytes` each, lse and delta (f32 per row); q, k, v and
// grad_out hold a constant bit pattern.
struct AttentionBuffers {
  AttentionBuffers(cuda::DeviceContext& context, long batch, long heads, long t, long d, std::size_t element_bytes)
      : q(size(batch, heads, t, d, element_bytes), 0),
        k(q.bytes(), 0),
        v(q.bytes(), 0),
        out(q.bytes(), 0),
        go(q.bytes(), 0),
        gq(q.bytes(), 0),
        gk(q.bytes(), 0),
        gv(q.bytes(), 0),
        lse(static_cast<std::size_t>(batch * heads * t) * 4, 0),
        delta(lse.bytes(), 0) {
    for (cuda::DeviceBuffer* b : {&q, &k, &v, &go}) {
      MYRIAD_CUDA_CHECK(cudaMemsetAsync(b->data(), 0x3c, b->bytes(), context.stream()));
    }
  }
  static std::size_t size(long batch, long heads, long t, long d, std::size_t element_bytes) {
    return static_cast<std::size_t>(batch * heads * t * d) * element_bytes;
  }
  cuda::DeviceBuffer q, k, v, out, go, gq, gk, gv, lse, delta;
};

// printf of one number into a string.
std::string fmt_value(double value, const char* format) {
  char text[32];
  std::snprintf(text, sizeof text, format, value);
  return text;
}

// FLOP/s of the engine's f32 flash attention, forward + backward (3.5x the forward's FLOPs), at
// batch x 16 heads x t x d, causal.
double engine_attention_flops_per_s(cuda::DeviceContext& context, long batch, long t, long d) {
  const long heads = 16;
  AttentionBuffers a(context, batch, heads, t, d, 4);
  auto &q = a.q, &k = a.k, &v = a.v, &out = a.out, &go = a.go, &gq = a.gq, &gk = a.gk, &gv = a.gv, &lse = a.lse,
       &delta = a.delta;
  const cuda::FlashAttentionShape shape{batch, heads, heads, t, d, 0.0f, true};
  auto f = [](const cuda::DeviceBuffer& b) { return b.as<float>(); };
  auto both = [&] {
    cuda::flash_attention_forward_f32(f(q), f(k), f(v), f(out), f(lse), shape, context.stream());
    cuda::flash_attention_backward_f32(f(q), f(k), f(v), f(out), f(lse), f(go), f(gq), f(gk), f(gv), f(delta),
                                       batch * heads * t, shape, context.stream());
  };
  const double fwd_flops = 4.0 * batch * heads * static_cast<double>(t) * t * d / 2.0;
  return 3.5 * fwd_flops / best_seconds(context.stream(), both);
}

}  // namespace

int main(int argc, char** argv) {
  if (cuda::cuda_device_count_or_zero() == 0) {
    std::printf("bench_attention_gpu: no CUDA device\n");
    return 0;
  }
  std::map<Key, std::pair<double, double>> sdpa;
  bool long_sequences = false;
  std::string profile;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--sdpa") == 0 && i + 1 < argc) {
      sdpa = read_sdpa(argv[++i]);
    } else if (std::strcmp(argv[i], "--long") == 0) {
      long_sequences = true;
    } else if (std::strcmp(argv[i], "--profile") == 0 && i + 1 < argc) {
      profile = argv[++i];
    } else {
      std::fprintf(stderr, "usage: bench_attention_gpu [--sdpa FILE] [--long] [--profile FILE]\n");
      return 2;
    }
  }
  if (!profile.empty() && !myriad::bench::profile_writable_or_report("bench_attention_gpu", profile)) return 1;
  cuda::DeviceContext context(0);
  cudaDeviceProp prop{};
  MYRIAD_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("# bench_attention_gpu\n\n- device: %s; bf16 q, k, v, out; batch x heads x T = 16k x 16 rows of work\n\n",
              prop.name);
  // cuDNN's fused attention as the engine's 16-bit attention runs it (cuda/cudnn_attention.h).
  std::string cudnn_why_not;
  const std::shared_ptr<cuda::CudnnAttention> cudnn = cuda::make_cudnn_attention(context.stream(), cudnn_why_not);
  if (cudnn == nullptr) std::printf("- cuDNN attention: not available (%s)\n\n", cudnn_why_not.c_str());
  std::printf(
      "| T | D | causal | fwd | fwd+bwd | tensor-core fwd | tensor-core fwd+bwd | cuDNN fwd | cuDNN fwd+bwd | SDPA fwd "
      "| SDPA fwd+bwd | tensor-core fwd+bwd vs SDPA | cuDNN fwd vs SDPA | cuDNN fwd+bwd vs SDPA |\n"
      "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
  for (long t : {1024L, 2048L, 4096L, 8192L, 16384L}) {
    if (t > 4096 && !long_sequences) break;
    for (long d : {64L, 128L}) {
      for (int causal : {1, 0}) {
        const long heads = 16, batch = std::max(1L, 16384L / t);
        AttentionBuffers a(context, batch, heads, t, d, 2);
        auto &q = a.q, &k = a.k, &v = a.v, &out = a.out, &go = a.go, &gq = a.gq, &gk = a.gk, &gv = a.gv, &lse = a.lse,
             &delta = a.delta;
        const cuda::FlashAttentionShape shape{batch, heads, heads, t, d, 0.0f, causal == 1};
        auto bf = [](const cuda::DeviceBuffer& b) { return b.as<__nv_bfloat16>(); };
        auto forward = [&] {
          cuda::flash_attention_forward_bf16(bf(q), bf(k), bf(v), bf(out), lse.as<float>(), shape, context.stream());
        };
        auto both = [&] {
          forward();
          cuda::flash_attention_backward_bf16(bf(q), bf(k), bf(v), bf(out), lse.as<float>(), bf(go), bf(gq), bf(gk),
                                              bf(gv), delta.as<float>(), batch * heads * t, shape, context.stream());
        };
        auto tc_forward = [&] {
          cuda::flash_attention_forward_tc_bf16(bf(q), bf(k), bf(v), bf(out), lse.as<float>(), shape, context.stream());
        };
        const double fwd_flops = 4.0 * batch * heads * static_cast<double>(t) * t * d / (causal ? 2.0 : 1.0);
        const double fwd_s = best_seconds(context.stream(), forward), both_s = best_seconds(context.stream(), both);
        auto tc_both = [&] {
          tc_forward();
          cuda::flash_attention_backward_tc_bf16(bf(q), bf(k), bf(v), bf(out), lse.as<float>(), bf(go), bf(gq), bf(gk),
                                                 bf(gv), delta.as<float>(), batch * heads * t, shape, context.stream());
        };
        const double tc_s = best_seconds(context.stream(), tc_forward);
        const double tc_both_s = best_seconds(context.stream(), tc_both);
        const double fwd_tflops = fwd_flops / fwd_s / 1e12, tc_tflops = fwd_flops / tc_s / 1e12;
        const double both_tflops = 3.5 * fwd_flops / both_s / 1e12, tc_both_tflops = 3.5 * fwd_flops / tc_both_s / 1e12;
        double cudnn_tflops = 0.0, cudnn_both_tflops = 0.0;  // 0: not run
        const cuda::CudnnAttentionShape cudnn_shape{.batch = batch,
                                                    .q_heads = heads,
                                                    .kv_heads = heads,
                                                    .seq = t,
                                                    .head_dim = d,
                                                    .scale = static_cast<float>(1.0 / std::sqrt(double(d))),
                                                    .causal = causal == 1};
        std::int64_t forward_bytes = 0, backward_bytes = 0;
        std::string why_not;
        if (cudnn != nullptr && cuda::cudnn_attention_prepare(*cudnn, cudnn_shape, false, forward_bytes, why_not) &&
            cuda::cudnn_attention_prepare(*cudnn, cudnn_shape, true, backward_bytes, why_not)) {
          cuda::DeviceBuffer workspace(
              static_cast<std::size_t>(std::max<std::int64_t>({forward_bytes, backward_bytes, 16})), 0);
          auto cudnn_forward = [&] {
            cuda::cudnn_attention_forward(*cudnn, cudnn_shape, bf(q), bf(k), bf(v), bf(out), lse.as<float>(),
                                          workspace.data());
          };
          auto cudnn_both = [&] {
            cudnn_forward();
            cuda::cudnn_attention_backward(*cudnn, cudnn_shape, bf(q), bf(k), bf(v), bf(out), lse.as<float>(), bf(go),
                                           bf(gq), bf(gk), bf(gv), workspace.data());
          };
          cudnn_tflops = fwd_flops / best_seconds(context.stream(), cudnn_forward) / 1e12;
          cudnn_both_tflops = 3.5 * fwd_flops / best_seconds(context.stream(), cudnn_both) / 1e12;
        } else if (cudnn != nullptr) {
          std::printf("<!-- cuDNN: %s -->\n", why_not.c_str());
        }
        const auto cell = [](double value) { return value > 0.0 ? fmt_value(value, "%.1f") : std::string("-"); };
        const auto share = [](double value, double base) {
          return value > 0.0 && base > 0.0 ? fmt_value(100.0 * value / base, "%.0f") + "%" : std::string("-");
        };
        auto found = sdpa.find({t, d, causal});
        const double sdpa_fwd = found == sdpa.end() ? 0.0 : fwd_flops / found->second.first / 1e12;
        const double sdpa_both = found == sdpa.end() ? 0.0 : 3.5 * fwd_flops / found->second.second / 1e12;
        std::printf("| %ld | %ld | %s | %.1f | %.1f | %.1f | %.1f | %s | %s | %s | %s | %s | %s | %s |\n", t, d,
                    causal ? "yes" : "no", fwd_tflops, both_tflops, tc_tflops, tc_both_tflops,
                    cell(cudnn_tflops).c_str(), cell(cudnn_both_tflops).c_str(), cell(sdpa_fwd).c_str(),
                    cell(sdpa_both).c_str(), share(tc_both_tflops, sdpa_both).c_str(),
                    share(cudnn_tflops, sdpa_fwd).c_str(), share(cudnn_both_tflops, sdpa_both).c_str());
        std::fflush(stdout);
      }
    }
  }
  if (!profile.empty()) {
    constexpr long kBatch = 8, kT = 2048, kD = 128;
    const double rate = engine_attention_flops_per_s(context, kBatch, kT, kD);
    bench::write_profile_parts(
        profile, "bench_attention_gpu",
        {{"compute.attention_flops_per_s", rate},
         {"compute.attention_shape",
          {{"B", kBatch},
           {"H", 16},
           {"D", kD},
           {"T", kT},
           {"pass", "forward + backward, causal, f32 (flash_attention_*_f32)"}}}},
        std::string(prop.name) + " (sm_" + std::to_string(prop.major) + std::to_string(prop.minor) + ")",
        bench::joined_command_line(argc, argv));
    std::printf(
        "\nprofile: %s (compute.attention_flops_per_s %.1f TFLOP/s: the engine's f32 kernels, T %ld, D %ld, "
        "causal; merged)\n",
        profile.c_str(), rate / 1e12, kT, kD);
  }
  return 0;
}
