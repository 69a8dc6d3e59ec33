// bench_gpt2_step_gpu: one GPT-2 training step (forward, backward, clipping, AdamW) of the one
// model (nn::GptModel placed on a cuda::CudaBackend, optim::AdamWOptimizer) on one GPU, in
// tokens/s and MFU, against PyTorch's step on the same GPU.
// Model: GPT-2 124M (12 layers, 12 heads, C 768, vocabulary 50257, block 1024), random tokens;
// f32 masters; rows: f32 compute, and bf16 compute as training.precision bf16 runs it (weights and
// the residual stream rounded to bf16, every linear layer's GEMM on the kept bf16 weight copies
// that AdamW writes in its pass, attention's products in bf16: cuDNN's fused attention where the
// build has it, else the tensor-core kernels), and fp8 as training.precision fp8 runs it (bf16 with
// the blocks' linear layers on cuBLASLt FP8 GEMMs under delayed scaling; "skipped" with the reason
// below sm_89), and "bf16 + CUDA graph": bf16 with the forward and backward recorded once as a CUDA
// graph and replayed every step, as training.cuda_graphs runs a micro-batch (train/micro_batch_graph.h;
// the optimizer step stays outside the graph), and "fp8 + CUDA graph" likewise (the delayed scales
// read from the device by the replayed kernels). FLOPs per token from nn::GptModel::flops_per_token (6 x matrix
// parameters + 6 L T C); MFU over the bf16 dense datasheet peak of the GPU (core/gpu_peak.h: 989.4 TFLOP/s on H100/H200
// SXM; --peak-tflops overrides), for every row, as the bar defines it. With `--reference FILE` (written by
// benchmarks/gpu/gpt2_step_reference.py: "tokens/s mfu seconds") it prints the ratio to PyTorch eager — the bar is
// >= 1.0x (goal 1.3x) and MFU >= 45 %;
// `--compiled FILE` (the same script with --compile) adds the ratio to torch.compile.
// Time: mean of --steps steps after 3 warm-up steps (host wall clock; each step synchronises
// once to read the loss). Exits 0 with a note when no GPU is visible.
// Usage: bench_gpt2_step_gpu [--batch 16] [--seq 1024] [--steps 10] [--layers 12]
//        [--reference gpt2_reference.txt] [--compiled gpt2_compiled.txt] [--peak-tflops T]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>
#include <fstream>
#include <string>
#include <utility>

#include "myriad/core/gpu_peak.h"
#include "myriad/core/philox.h"
#include "myriad/cuda/cuda_backend.h"
#include "myriad/cuda/device_context.h"
#include "myriad/cuda/stream_graph.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/ops/elementwise.h"
#include "myriad/optim/adamw_optimizer.h"

using namespace myriad;

namespace {

struct Options {
  std::int64_t batch = 16, seq = 1024, layers = 12;
  int steps = 10;
  double peak_tflops = 0.0;  // 0 = the GPU table's bf16 dense peak
  std::string reference, compiled;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    auto next = [&]() -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "bench_gpt2_step_gpu: %s needs a value\n", arg.c_str());
        std::exit(2);
      }
      return argv[++i];
    };
    if (arg == "--batch")
      o.batch = std::atoll(next());
    else if (arg == "--seq")
      o.seq = std::atoll(next());
    else if (arg == "--layers")
      o.layers = std::atoll(next());
    else if (arg == "--steps")
      o.steps = std::atoi(next());
    else if (arg == "--peak-tflops")
      o.peak_tflops = std::atof(next());
    else if (arg == "--reference")
      o.reference = next();
    else if (arg == "--compiled")
      o.compiled = next();
    else {
      std::fprintf(stderr, "bench_gpt2_step_gpu: unknown argument %s\n", arg.c_str());
      std::exit(2);
    }
  }
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  Options o = parse(argc, argv);
  if (cuda::cuda_device_count_or_zero() == 0) {
    std::printf("bench_gpt2_step_gpu: no CUDA device visible; nothing measured\n");
    return 0;
  }
  // "tokens/s mfu seconds" as gpt2_step_reference.py writes it; tokens 0 when absent.
  const auto read_reference = [](const std::string& path, double& tokens, double& mfu) {
    tokens = mfu = 0.0;
    if (path.empty()) return;
    std::ifstream in(path);
    if (!(in >> tokens >> mfu)) tokens = 0.0;
  };
  double reference_tokens = 0.0, reference_mfu = 0.0, compiled_tokens = 0.0, compiled_mfu = 0.0;
  read_reference(o.reference, reference_tokens, reference_mfu);
  read_reference(o.compiled, compiled_tokens, compiled_mfu);
  cudaDeviceProp prop{};
  (void)cudaGetDeviceProperties(&prop, 0);
  const GpuPeak table = gpu_dense_peak({prop.name, prop.major, prop.minor, prop.multiProcessorCount}, DType::bf16);
  const bool from_table = o.peak_tflops <= 0.0;
  if (from_table) o.peak_tflops = table.flops / 1e12;
  std::printf("MFU peak: %.1f TFLOP/s (%s)\n", o.peak_tflops, from_table ? table.source.c_str() : "--peak-tflops");
  const nn::TransformerConfig config = nn::TransformerConfig::gpt2(50257, o.layers, 12, 768, 1024);
  nn::GptModel host(config);
  host.initialize(1234);
  const double flops_per_token = host.flops_per_token(o.seq);

  Tensor ids = Tensor::empty({o.batch, o.seq}, DType::i32), targets = Tensor::empty({o.batch, o.seq}, DType::i32);
  Tensor u = Tensor::empty({2 * o.batch * o.seq});
  fill_uniform(u, 0.0f, 1.0f, 99, 0);
  for (std::int64_t i = 0; i < o.batch * o.seq; ++i) {
    ids.data<std::int32_t>()[i] = static_cast<std::int32_t>(u.data<float>()[i] * 50257.0f) % 50257;
    targets.data<std::int32_t>()[i] =
        static_cast<std::int32_t>(u.data<float>()[o.batch * o.seq + i] * 50257.0f) % 50257;
  }
  const float loss_scale = 1.0f / static_cast<float>(o.batch * o.seq);

  std::printf("bench_gpt2_step_gpu on %s: GPT-2 %lldL C768, B %lld x T %lld, %d steps, MFU over %.0f TFLOP/s\n",
              prop.name, static_cast<long long>(o.layers), static_cast<long long>(o.batch),
              static_cast<long long>(o.seq), o.steps, o.peak_tflops);
  std::printf(
      "| compute | step (ms) | tokens/s | MFU | loss | activations (GiB) | vs PyTorch eager | vs torch.compile |\n");
  std::printf("|---|---|---|---|---|---|---|---|\n");
  struct Mode {
    const char* name;
    DType format;
    bool fp8;
    bool graphs = false;  // training.cuda_graphs: forward + backward replayed as one CUDA graph
  };
  for (const Mode& mode_row : {Mode{"f32", DType::f32, false}, Mode{"bf16", DType::bf16, false},
                               Mode{"bf16 + CUDA graph", DType::bf16, false, true}, Mode{"fp8", DType::bf16, true},
                               Mode{"fp8 + CUDA graph", DType::bf16, true, true}}) {
    const DType format = mode_row.format;
    cuda::DeviceContext context(0);
    cuda::CudaBackend backend(context);
    if (mode_row.fp8 && !backend.fp8_unavailable().empty()) {
      std::printf("| %s | skipped: %s | | | | | | |\n", mode_row.name, backend.fp8_unavailable().c_str());
      continue;
    }
    const ops::Placement placement{&backend};
    nn::GptModel model(config, {}, true, placement);
    model.initialize(1234);  // the same values as the host model (drawn by name and index)
    optim::AdamWOptimizer optimizer(model.parameters(), optim::AdamWConfig{});
    // bf16: the weights the model reads and their 16-bit GEMM operands, written by AdamW's pass (as
    // the Engine does at ZeRO 0: train/compose_rank.cpp).
    Tensor compute, operands;
    if (format != DType::f32) {
      nn::ParameterStore& store = model.parameters();
      compute = placement.zeros({store.numel()});
      operands = placement.empty({store.numel()}, format);
      copy(store.flat_values(), compute);
      round_to_format(compute, format);
      copy(compute, operands);
      store.rebind(0, store.numel(), compute, Tensor());
      store.bind_operands(operands);
      std::vector<Tensor> rounded, narrow;
      for (const nn::Parameter& p : store.all()) {
        rounded.push_back(p.value);
        narrow.push_back(p.operand);
      }
      optimizer.set_compute_copies(format, rounded, narrow);
      model.set_activation_precision(format);
    }
    // fp8: as training.precision fp8 — the blocks' linear layers on FP8 GEMMs, delayed scales
    // advanced after every step (one GPU: no reduction over ranks).
    if (mode_row.fp8) model.enable_fp8(nn::Fp8Recipe{});
    double mean_loss = 0.0;
    // With graphs, as train::MicroBatchGraph does: the inputs staged in fixed device tensors and the
    // loss gradient written before the pass; the first pass as usual, the second in the graph's
    // pool, the third recorded, then replays; the losses recorded after each pass.
    cuda::PooledStreamGraph graph(context);
    const Tensor staged_ids = placement.from_host(ids), staged_targets = placement.from_host(targets);
    int passes = 0;
    auto staged_pass = [&] {
      model.set_inputs_staged(true);
      model.forward_chunk(0, 0, staged_ids, staged_targets);
      model.backward_chunk(0, 0, staged_ids, staged_targets, 0.0f);
      model.set_inputs_staged(false);
    };
    auto forward_backward = [&]() -> nn::LossSum {
      if (!mode_row.graphs || passes++ == 0) return model.forward_backward(ids, targets, loss_scale, Recompute::none);
      model.write_loss_scale(loss_scale);
      if (passes == 2) {
        graph.run_in_pool(staged_pass);
      } else {
        if (!graph.recorded()) graph.record(staged_pass);
        graph.replay();
      }
      model.record_losses(0);
      return nn::LossSum{model.take_loss_sum(), o.batch * o.seq};
    };
    auto step = [&] {
      model.parameters().zero_grads();
      const nn::LossSum loss = forward_backward();
      (void)optimizer.step(6e-4f, optimizer.grad_sum_squares());
      if (nn::Fp8Scaling* fp8 = model.fp8_scaling()) fp8->end_step([](Tensor&) {});
      mean_loss = loss.sum / static_cast<double>(loss.tokens);
    };
    const char* mode = mode_row.name;
    for (int i = 0; i < 3; ++i) step();  // with graphs: as usual, in the pool, recorded
    context.synchronize();
    const auto start = std::chrono::steady_clock::now();
    for (int i = 0; i < o.steps; ++i) step();
    context.synchronize();
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() / o.steps;
    const double tokens_per_second = static_cast<double>(o.batch * o.seq) / seconds;
    const double mfu = o.peak_tflops > 0 ? flops_per_token * tokens_per_second / (o.peak_tflops * 1e12) : 0.0;
    char ratio[32] = "-", compiled_ratio[32] = "-";
    if (reference_tokens > 0.0) std::snprintf(ratio, sizeof ratio, "%.2fx", tokens_per_second / reference_tokens);
    if (compiled_tokens > 0.0) {
      std::snprintf(compiled_ratio, sizeof compiled_ratio, "%.2fx", tokens_per_second / compiled_tokens);
    }
    const nn::ActivationMemory activations = model.activation_memory(o.batch, o.seq, Recompute::none);
    std::printf("| %s | %.1f | %.0f | %.1f%% | %.3f | %.1f | %s | %s |\n", mode, seconds * 1e3, tokens_per_second,
                100.0 * mfu, mean_loss, static_cast<double>(activations.saved_bytes) / (1 << 30), ratio,
                compiled_ratio);
  }
  if (reference_tokens > 0.0) {
    std::printf("PyTorch reference (bf16 autocast): %.0f tokens/s, MFU %.1f%%\n", reference_tokens,
                100.0 * reference_mfu);
  }
  if (compiled_tokens > 0.0) {
    std::printf("PyTorch reference with torch.compile: %.0f tokens/s, MFU %.1f%%\n", compiled_tokens,
                100.0 * compiled_mfu);
  }
  return 0;
}
