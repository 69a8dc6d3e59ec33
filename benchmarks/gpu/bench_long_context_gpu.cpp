// bench_long_context_gpu: one long document on one GPU — the model of bench_long_context (a tiny
// LLaMA-style model: 2 layers, C 64, 4 heads / 2 kv heads, vocabulary 1024) placed on the CUDA
// backend, with fixed block-sparse attention (blocks of 64: the diagonal one, a window of 4, 1
// sink) against the same model with dense causal attention, measured in the same run.
// Rows per attention kind: --passes evaluations (forward + loss) and --passes training steps
// (forward, backward with full recompute, AdamW): seconds (host wall clock around a pass that
// ends by reading the loss, i.e. one synchronisation), the loss, and the device memory in use
// after the pass and its most over the run (cudaMemGetInfo: total - free, the caching allocator's
// pool included) — flat across passes when nothing leaks. The ratio column is dense seconds over
// block-sparse seconds for the same row. Exits 0 with a note when no GPU is visible.
// Usage: bench_long_context_gpu [--tokens 131072] [--passes 3] [--no-dense]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "myriad/core/philox.h"
#include "myriad/cuda/cuda_backend.h"
#include "myriad/cuda/device_context.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/optim/adamw_optimizer.h"

using namespace myriad;

namespace {

struct Options {
  std::int64_t tokens = 131072;
  int passes = 3;
  bool dense = true;
};

Options parse(int argc, char** argv) {
  Options o;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--tokens" && i + 1 < argc) {
      o.tokens = std::atoll(argv[++i]);
    } else if (arg == "--passes" && i + 1 < argc) {
      o.passes = std::atoi(argv[++i]);
    } else if (arg == "--no-dense") {
      o.dense = false;
    } else {
      std::fprintf(stderr, "usage: bench_long_context_gpu [--tokens N] [--passes P] [--no-dense]; got %s\n",
                   arg.c_str());
      std::exit(2);
    }
  }
  if (o.tokens < 128 || o.tokens % 64 != 0 || o.passes < 1) {
    std::fprintf(stderr, "bench_long_context_gpu: --tokens must be a multiple of 64 (>= 128), --passes >= 1\n");
    std::exit(2);
  }
  return o;
}

nn::TransformerConfig long_model(std::int64_t T, bool sparse) {
  nn::TransformerConfig c = nn::TransformerConfig::llama(1024, 2, 4, 2, 64, T);
  if (sparse) {
    c.attention.kind = nn::AttentionKind::block_sparse;
    c.attention.block_size = 64;
    c.attention.fixed = {.local_blocks = 4, .global_blocks = 1};
  }
  return c;
}

double used_gib() {
  std::size_t free = 0, total = 0;
  if (cudaMemGetInfo(&free, &total) != cudaSuccess) return 0.0;
  return static_cast<double>(total - free) / (1024.0 * 1024.0 * 1024.0);
}

struct Row {
  std::string what;
  double seconds = 0.0, loss = 0.0, used = 0.0;
};

// The passes of one attention kind: evaluations, then training steps.
std::vector<Row> run(const Options& o, bool sparse, double& most_used) {
  const std::int64_t T = o.tokens;
  const nn::TransformerConfig config = long_model(T, sparse);
  Tensor ids = Tensor::empty({1, T}, DType::i32), targets = Tensor::empty({1, T}, DType::i32);
  for (std::int64_t i = 0; i < T; ++i) {  // the document of bench_long_context
    ids.data<std::int32_t>()[i] = static_cast<std::int32_t>(philox4x32(11, 0, static_cast<std::uint64_t>(i))[0] % 1024);
    targets.data<std::int32_t>()[i] =
        static_cast<std::int32_t>(philox4x32(11, 0, static_cast<std::uint64_t>(i + 1))[0] % 1024);
  }
  cuda::DeviceContext context(0);
  cuda::CudaBackend backend(context);
  nn::GptModel model(config, {}, true, ops::Placement{&backend});
  model.initialize(7);
  optim::AdamWOptimizer optimizer(model.parameters(), optim::AdamWConfig{});
  std::vector<Row> rows;
  const char* kind = sparse ? "block-sparse" : "dense causal";
  for (int pass = 1; pass <= o.passes; ++pass) {
    const auto start = std::chrono::steady_clock::now();
    const nn::LossSum loss = model.forward_loss(ids, targets);  // its loss read synchronises once
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double used = used_gib();
    most_used = std::max(most_used, used);
    rows.push_back({std::string(kind) + " evaluation " + std::to_string(pass), seconds,
                    loss.sum / static_cast<double>(loss.tokens), used});
  }
  for (int step = 1; step <= o.passes; ++step) {
    const auto start = std::chrono::steady_clock::now();
    model.parameters().zero_grads();
    const nn::LossSum loss =
        model.forward_backward(ids, targets, 1.0f / static_cast<float>(T), Recompute::full);  // one read
    (void)optimizer.step(3e-3f, optimizer.grad_sum_squares());                                // one read
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    const double used = used_gib();
    most_used = std::max(most_used, used);
    rows.push_back({std::string(kind) + " train step " + std::to_string(step), seconds,
                    loss.sum / static_cast<double>(loss.tokens), used});
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  const Options o = parse(argc, argv);
  if (cuda::cuda_device_count_or_zero() == 0) {
    std::printf("bench_long_context_gpu: no CUDA device visible; nothing measured\n");
    return 0;
  }
  cudaDeviceProp prop{};
  (void)cudaGetDeviceProperties(&prop, 0);
  std::printf(
      "bench_long_context_gpu on %s: one document of %lld tokens, tiny LLaMA-style model (2 layers, C 64, 4/2 "
      "heads, V 1024), block-sparse blocks of 64 (window 4 + 1 sink) vs dense causal; training with full "
      "recompute and AdamW; device memory in use before the runs %.2f GiB\n",
      prop.name, static_cast<long long>(o.tokens), used_gib());
  double most_sparse = 0.0, most_dense = 0.0;
  const std::vector<Row> sparse = run(o, true, most_sparse);
  const std::vector<Row> dense = o.dense ? run(o, false, most_dense) : std::vector<Row>{};
  std::printf("| pass | seconds | loss | device memory in use (GiB) | dense seconds / block-sparse seconds |\n");
  std::printf("|---|---|---|---|---|\n");
  for (std::size_t i = 0; i < sparse.size(); ++i) {
    char ratio[32] = "-";
    if (i < dense.size() && sparse[i].seconds > 0)
      std::snprintf(ratio, sizeof ratio, "%.2fx", dense[i].seconds / sparse[i].seconds);
    std::printf("| %s | %.3f | %.4f | %.2f | %s |\n", sparse[i].what.c_str(), sparse[i].seconds, sparse[i].loss,
                sparse[i].used, ratio);
  }
  for (const Row& r : dense) {
    std::printf("| %s | %.3f | %.4f | %.2f | |\n", r.what.c_str(), r.seconds, r.loss, r.used);
  }
  char dense_part[64] = "";
  if (o.dense) std::snprintf(dense_part, sizeof dense_part, ", dense causal %.2f GiB", most_dense);
  std::printf("most device memory in use: block-sparse %.2f GiB%s\n", most_sparse, dense_part);
  return 0;
}
