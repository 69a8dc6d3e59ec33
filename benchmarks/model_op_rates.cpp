// Implementation of the model-shape op rates (see model_op_rates.h).
#include "model_op_rates.h"

#include "harness.h"
#include "myriad/core/philox.h"
#include "myriad/ops/activations.h"
#include "myriad/ops/adamw.h"
#include "myriad/ops/elementwise.h"
#include "myriad/ops/matmul.h"
#include "myriad/ops/norms.h"

namespace myriad::bench {

namespace {

Tensor filled(const Shape& shape, std::uint64_t stream) {
  Tensor t = Tensor::empty(shape);
  fill_uniform(t, -1, 1, 17, stream);
  return t;
}

// Forward + backward GEMMs of one block and the head on one of `tp` tensor-parallel ranks: the
// column-parallel qkv and fc split N, the row-parallel proj and fc2 split K, the vocabulary-parallel
// head splits V (rounded up). FLOPs and seconds summed over the shapes; min_total_s per timing.
struct GemmTotals {
  double flops = 0, seconds = 0, backward_flops = 0, backward_seconds = 0;
};

GemmTotals time_block_gemms(std::int64_t M, std::int64_t C, std::int64_t vocab, std::int64_t tp, double min_total_s) {
  GemmTotals t;
  std::uint64_t stream = 0;
  const std::int64_t head = (vocab + tp - 1) / tp;
  for (auto [k, n] : {std::pair{C, 3 * C / tp}, {C / tp, C}, {C, 4 * C / tp}, {4 * C / tp, C}, {C, head}}) {
    Tensor x = filled({M, k}, stream++), w = filled({n, k}, stream++), y = Tensor::empty({M, n});
    Tensor gy = filled({M, n}, stream++), gx = Tensor::empty({M, k}), gw = Tensor::empty({n, k});
    const MatmulArgs args{.transpose_b = true};
    const double fwd_s = time_it([&] { matmul_forward(args, x, w, y); }, 1, 5, min_total_s).median_s;
    const double bwd_s = time_it([&] { matmul_backward(args, x, w, gy, gx, gw); }, 1, 5, min_total_s).median_s;
    const double f = 2.0 * static_cast<double>(M) * static_cast<double>(n) * static_cast<double>(k);
    t.flops += 3.0 * f;
    t.seconds += fwd_s + bwd_s;
    t.backward_flops += 2.0 * f;
    t.backward_seconds += bwd_s;
  }
  return t;
}

}  // namespace

ModelOpRates measure_model_op_rates(std::int64_t tokens, std::int64_t embd, std::int64_t vocab,
                                    std::int64_t optimizer_elements) {
  const std::int64_t M = tokens, C = embd;
  ModelOpRates r;
  // GEMMs: (K, N) of the block's linears and the head, whole and on one rank of each tp split.
  const GemmTotals whole = time_block_gemms(M, C, vocab, 1, 0.2);
  r.gemm_training_flops_per_s = whole.flops / whole.seconds;
  r.gemm_backward_flops_per_s = whole.backward_flops / whole.backward_seconds;
  for (const std::int64_t tp : {2, 4, 8}) {
    if (C % tp != 0) continue;
    const GemmTotals split = time_block_gemms(M, C, vocab, tp, 0.1);
    r.gemm_training_flops_per_s_by_tp.emplace_back(static_cast<int>(tp), split.flops / split.seconds);
  }
  // Memory class: two layernorms and two residual adds; the GELU apart (its own rate).
  Tensor x = filled({M, C}, 40), gout = filled({M, C}, 41), res = filled({M, C}, 42);
  Tensor weight = filled({C}, 43), bias = filled({C}, 44), out = Tensor::empty({M, C});
  Tensor mean = Tensor::empty({M}), rstd = Tensor::empty({M}), gx = Tensor::empty({M, C}), gres = Tensor::empty({M, C});
  Tensor gw = Tensor::empty({C}), gb = Tensor::empty({C});
  Tensor h = filled({M, 4 * C}, 45), gh = filled({M, 4 * C}, 46), hout = Tensor::empty({M, 4 * C});
  Tensor ghx = Tensor::empty({M, 4 * C});
  layernorm_forward(LayernormArgs{}, x, weight, bias, out, mean, rstd);
  auto forward = [&] {
    for (int i = 0; i < 2; ++i) {
      layernorm_forward(LayernormArgs{}, x, weight, bias, out, mean, rstd);
      add_forward(AddArgs{}, x, res, out);
    }
  };
  auto backward = [&] {
    gw.zero();
    gb.zero();
    for (int i = 0; i < 2; ++i) {
      layernorm_backward(LayernormArgs{}, x, weight, mean, rstd, gout, gx, gw, gb);
      add_backward(AddArgs{}, gout, gres, gx);
    }
  };
  r.memory_seconds = time_it(forward, 1, 5, 0.2).median_s + time_it(backward, 1, 5, 0.2).median_s;
  r.memory_bytes_per_s = 3.0 * 4.0 * M * (2 * 2 * C + 2 * 3 * C) / r.memory_seconds;  // f32 norms + adds
  r.activation_seconds = time_it([&] { gelu_forward(GeluArgs{}, h, hout); }, 1, 5, 0.2).median_s +
                         time_it([&] { gelu_backward(GeluArgs{}, h, gh, ghx); }, 1, 5, 0.2).median_s;
  r.activation_bytes_per_s = 3.0 * 4.0 * M * (2 * 4 * C) / r.activation_seconds;  // f32 read + write 4C
  // AdamW over `optimizer_elements` (beyond the caches) and the gradients' zeroing: 32 bytes per element.
  Tensor p = filled({optimizer_elements}, 50), g = filled({optimizer_elements}, 51);
  Tensor m1 = Tensor::full({optimizer_elements}, 0.0), v1 = Tensor::full({optimizer_elements}, 0.0);
  std::int64_t step = 0;
  const double adam_s = time_it(
                            [&] {
                              adamw_update(AdamWArgs{.lr = 1e-4f, .step = ++step}, p, g, m1, v1);
                              do_not_optimize(p.data<float>());
                            },
                            1, 5, 0.2)
                            .median_s;
  const double zero_s = time_it([&] { g.zero(); }, 1, 5, 0.1).median_s;
  r.optimizer_bytes_per_s = 32.0 * static_cast<double>(optimizer_elements) / (adam_s + zero_s);
  return r;
}

}  // namespace myriad::bench
