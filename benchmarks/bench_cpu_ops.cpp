// bench_cpu_ops: the CPU ops' vector kernels at GPT-2 124M's shapes (B 8 T 256: 2048 token rows),
// each timed alone — cross-entropy over the padded 50304-column logits, LayerNorm over 768
// channels, GELU and the fused dGELU + bias-gradient pass over 3072, softmax over 256-wide rows,
// AdamW and the gradient norm over one block's 7.08 M weights — with the bytes each must move and
// their rate against a triad measured in the same run (256 MiB arrays, past the caches; an op whose
// arrays fit the last-level cache runs warm from there and can beat it). The
// header names what the kernels run as (ops/cpu_isa.h): the build machine's ISA, or in a portable
// build (MYRIAD_NATIVE=OFF) the clone the loader picked. Comparing a portable build's table with
// a native build's shows what the run-time dispatch recovers.
// Usage: OMP_NUM_THREADS=2 bench_cpu_ops [--rows N]
#include <cstdio>
#include <cstring>
#include <functional>
#include <string>

#include "harness.h"
#include "machine_profile.h"
#include "myriad/core/philox.h"
#include "myriad/ops/activations.h"
#include "myriad/ops/adamw.h"
#include "myriad/ops/cross_entropy.h"
#include "myriad/ops/linear.h"
#include "myriad/ops/norms.h"
#include "myriad/ops/softmax.h"

using namespace myriad;

namespace {

struct Row {
  std::string op;
  double bytes;  // what the op must read and write at least
  std::function<void()> run;
};

int run(int argc, char** argv) {
  std::int64_t rows = 2048;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--rows") == 0 && i + 1 < argc) {
      rows = std::stoll(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: bench_cpu_ops [--rows N]\n");
      return 2;
    }
  }
  if (rows < 1) {
    std::fprintf(stderr, "bench_cpu_ops: --rows must be >= 1\n");
    return 2;
  }
  bench::print_header("bench_cpu_ops: the CPU ops' vector kernels", argc, argv);
  const std::int64_t vocab = 50257, padded = 50304, C = 768, F = 4 * C, T = 256, block_weights = 12 * C * C;
  const double N = static_cast<double>(rows), f = 4.0;  // bytes per float

  Tensor logits = Tensor::empty({rows, padded}), dlogits = Tensor::empty({rows, padded});
  fill_uniform(logits, -8.0f, 8.0f, 1, 0);
  Tensor targets = Tensor::empty({rows}, DType::i32);
  for (std::int64_t n = 0; n < rows; ++n)
    targets.data<std::int32_t>()[n] = static_cast<std::int32_t>((n * 7919) % vocab);
  Tensor losses = Tensor::empty({rows}), lse = Tensor::empty({rows}), grad_losses = Tensor::full({rows}, 1.0f / N);
  const CrossEntropyArgs ce{.ignore_index = -100, .classes = vocab};

  Tensor x = Tensor::empty({rows, C}), w = Tensor::empty({C}), b = Tensor::empty({C}), dy = Tensor::empty({rows, C});
  fill_uniform(x, -2.0f, 2.0f, 1, 1);
  fill_uniform(w, 0.5f, 1.5f, 1, 2);
  fill_uniform(b, -0.1f, 0.1f, 1, 3);
  fill_uniform(dy, -0.01f, 0.01f, 1, 4);
  Tensor y = Tensor::empty({rows, C}), mean = Tensor::empty({rows}), rstd = Tensor::empty({rows});
  Tensor dx = Tensor::empty({rows, C}), dw = Tensor::zeros({C}), db = Tensor::zeros({C});

  Tensor h = Tensor::empty({rows, F}), hy = Tensor::empty({rows, F}), dh = Tensor::empty({rows, F});
  fill_uniform(h, -4.0f, 4.0f, 1, 5);
  fill_uniform(dh, -0.01f, 0.01f, 1, 6);
  Tensor dhx = Tensor::empty({rows, F}), h_bias_grad = Tensor::zeros({F});
  Tensor grad_y = Tensor::empty({rows, C}), w2 = Tensor::empty({C, F});  // the fused pass's GEMM inputs
  fill_uniform(grad_y, -0.01f, 0.01f, 1, 7);
  fill_uniform(w2, -0.03f, 0.03f, 1, 8);

  const std::int64_t score_rows = rows * 12;  // 12 heads' rows of T scores
  Tensor scores = Tensor::empty({score_rows, T}), probs = Tensor::empty({score_rows, T});
  fill_uniform(scores, -6.0f, 6.0f, 1, 9);

  Tensor p = Tensor::empty({block_weights}), g = Tensor::empty({block_weights});
  Tensor m = Tensor::zeros({block_weights}), v = Tensor::zeros({block_weights});
  fill_uniform(p, -0.1f, 0.1f, 1, 10);
  fill_uniform(g, -1e-3f, 1e-3f, 1, 11);
  const AdamWArgs adamw{.lr = 6e-4f, .weight_decay = 0.1f, .step = 10};
  const double W = static_cast<double>(block_weights);

  const std::vector<Row> table_rows = {
      {"cross_entropy_forward (" + std::to_string(rows) + " x 50257)", N * padded * f,
       [&] { cpu::cross_entropy_forward(ce, logits, targets, losses, lse); }},
      {"cross_entropy_backward", 2 * N * padded * f,
       [&] { cpu::cross_entropy_backward(ce, logits, targets, lse, grad_losses, dlogits); }},
      {"layernorm_forward (x 768)", 2 * N * C * f,
       [&] { cpu::layernorm_forward(LayernormArgs{}, x, w, b, y, mean, rstd); }},
      {"layernorm_backward", 3 * N * C * f,
       [&] { cpu::layernorm_backward(LayernormArgs{}, x, w, mean, rstd, dy, dx, dw, db); }},
      {"gelu_forward (x 3072)", 2 * N * F * f, [&] { cpu::gelu_forward(GeluArgs{}, h, hy); }},
      {"gelu_backward", 3 * N * F * f, [&] { cpu::gelu_backward(GeluArgs{}, h, dh, dhx); }},
      {"linear_dgelu_backward (GEMM 768 -> 3072 + fused pass)", 3 * N * F * f,
       [&] { cpu::linear_dgelu_backward(grad_y, w2, h, dhx, h_bias_grad); }},
      {"softmax_forward (12 heads x 256)", 2 * N * 12 * T * f,
       [&] { cpu::softmax_forward(SoftmaxArgs{}, scores, probs); }},
      {"adamw_update (one block's 7.08 M weights)", 7 * W * f, [&] { cpu::adamw_update(adamw, p, g, m, v); }},
      {"grad_norm_squared (7.08 M)", W * f, [&] { static_cast<void>(cpu::grad_norm_squared(g)); }},
  };
  const bench::StreamRates stream = bench::measure_stream(256.0 * (1 << 20));
  std::printf("- triad (256 MiB arrays, STREAM counting): %.1f GB/s\n\n", stream.triad_bytes_per_s / 1e9);
  std::printf("| op | ms (median) | GB/s of the bytes it must move | / triad |\n|---|---|---|---|\n");
  for (const Row& r : table_rows) {
    const bench::Timing t = bench::time_it(r.run, 2, 5, 0.3);
    const double rate = r.bytes / t.median_s;
    std::printf("| %s | %.3f | %.1f | %s |\n", r.op.c_str(), t.median_s * 1e3, rate / 1e9,
                bench::percent(rate / stream.triad_bytes_per_s).c_str());
  }
  std::printf(
      "\n- bytes: each input read once and each output written once (cross-entropy's backward reads the logits "
      "and writes their gradient; linear_dgelu_backward counts its fused pass only, its GEMM's time included)\n"
      "- each op is timed warm, called repeatedly on the same arrays: where they fit the last-level cache the op "
      "reads them from there and can run above the triad, which is measured past the caches\n");
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  return bench::run_reporting_errors("bench_cpu_ops", [&] { return run(argc, argv); });
}
