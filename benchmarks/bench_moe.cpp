// bench_moe: one mixture-of-experts layer (nn::MoeLayer: router, dispatch, the rank's experts as a
// grouped GEMM, combine; forward + backward) against a dense MLP with the same active parameters
// per token (F = top_k * expert width), measured in the same run, for balanced and skewed routing
// and any expert-parallel group (the world: mpirun -np EP). Also: the grouped GEMM alone against
// one sgemm of the same shape and FLOPs (the experts' compute rate), and the bytes each rank
// sends per token through the all-to-alls against the analytic count.
//
// Routing cases (dropless, so skew shows as load rather than drops):
//   balanced  router logits from a 0.02-std router on unit-variance inputs: near-uniform loads
//   hot expert  every token's first choice is expert 0 (a large logit on it)
//   hot rank    every token's first choice is among rank 0's experts (at ep 1 that is every
//               expert: the same load as balanced)
// Bytes per token and layer (forward + backward), over the whole ep group: what every rank handed
// to the all-to-alls (rows of C f32 values, plus the E routing counts), against the analytic
// count 2 x (rows a rank sends to other ranks' experts + rows it computes for other ranks) x C x
// 4 bytes — dispatch and its gradient, return and its gradient — summed over ranks per token:
// 4 x top_k x C x 4 x (ep - 1) / ep when balanced.
// Usage: OMP_NUM_THREADS=1 mpirun -np EP bench_moe [--quick] [--tokens N] [--embd C] [--experts E]
//        [--top-k K] (single process: ep 1)
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <iostream>
#include <memory>

#include "harness.h"
#include "myriad/core/philox.h"
#include "myriad/parallel/expert_parallel_group.h"
#include "myriad/distributed/mpi_runtime.h"
#include "myriad/distributed/scalar_reduce.h"
#include "myriad/nn/linear.h"
#include "myriad/nn/moe_layer.h"
#include "myriad/ops/activations.h"
#include "myriad/ops/grouped_matmul.h"
#include "myriad/ops/matmul.h"

using namespace myriad;
using namespace myriad::bench;

namespace {

constexpr const char* kUsage = "usage: bench_moe [--quick] [--tokens N] [--embd C] [--experts E] [--top-k K]";

struct Args {
  bool help = false;
  bool quick = false;
  std::int64_t tokens = 4096, embd = 512;
  int experts = 8, top_k = 2;
};

Args parse(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const auto value = [&] {
      MYRIAD_CHECK(i + 1 < argc, argv[i] << " needs a value");
      const std::string option = argv[i];
      return whole_option(option, argv[++i]);
    };
    if (std::strcmp(argv[i], "--help") == 0)
      a.help = true;
    else if (std::strcmp(argv[i], "--quick") == 0)
      a.quick = true;
    else if (std::strcmp(argv[i], "--tokens") == 0)
      a.tokens = value();
    else if (std::strcmp(argv[i], "--embd") == 0)
      a.embd = value();
    else if (std::strcmp(argv[i], "--experts") == 0)
      a.experts = static_cast<int>(value());
    else if (std::strcmp(argv[i], "--top-k") == 0)
      a.top_k = static_cast<int>(value());
    else
      MYRIAD_THROW("unknown option '" << argv[i] << "'; " << kUsage);
  }
  if (a.quick) a.tokens = std::min<std::int64_t>(a.tokens, 1024);
  MYRIAD_CHECK(a.top_k <= a.experts, "--top-k " << a.top_k << " exceeds --experts " << a.experts);
  MYRIAD_CHECK(a.tokens % 512 == 0, "--tokens " << a.tokens << " must be a multiple of 512 (sequences of 512)");
  return a;
}

nn::TransformerConfig moe_config(const Args& a) {
  nn::TransformerConfig c = nn::TransformerConfig::gpt2(64, 1, 8, a.embd, 512);
  c.moe.num_experts = a.experts;
  c.moe.top_k = a.top_k;
  c.moe.expert_ffn = 2 * a.embd;  // top_k 2: 4C active, GPT-2's dense width
  c.moe.aux_loss_coef = 0.01f;
  c.moe.z_loss_coef = 0.001f;
  return c;
}

enum class Routing { balanced, hot_expert, hot_rank };
const char* routing_name(Routing r) {
  return r == Routing::balanced ? "balanced" : r == Routing::hot_expert ? "hot expert" : "hot rank";
}

// A mean input direction every token shares; the router rows of the favoured experts point at it.
void skew_router(nn::ParameterStore& store, const Tensor& direction, Routing routing, int experts, int ep) {
  if (routing == Routing::balanced) return;
  Tensor router = store.find("blocks.0.moe.router.weight").value;
  const std::int64_t C = router.size(1);
  const int favoured = routing == Routing::hot_expert ? 1 : experts / ep;
  for (int e = 0; e < favoured; ++e) {
    for (std::int64_t c = 0; c < C; ++c) router.data<float>()[e * C + c] += 0.5f * direction.data<float>()[c];
  }
}

}  // namespace

int main(int argc, char** argv) {
  distributed::MpiRuntime runtime(&argc, &argv);
  std::unique_ptr<distributed::Communicator> world = runtime.world();
  const int ep = world->size(), rank = world->rank();
  Args a;
  try {  // every rank sees the same argv: all refuse it alike, before any collective
    a = parse(argc, argv);
    MYRIAD_CHECK(a.experts % ep == 0, "--experts " << a.experts << " must divide over " << ep << " ranks");
  } catch (const Error& e) {
    if (rank == 0) std::cerr << "bench_moe: " << e.message() << "\n";
    return 2;
  }
  if (a.help) {
    if (rank == 0) std::cout << kUsage << "\n";
    return 0;
  }
  if (rank == 0) print_header("bench_moe: an MoE layer vs a dense MLP of the same active parameters", argc, argv);
  const nn::TransformerConfig config = moe_config(a);
  const std::int64_t N = a.tokens, C = a.embd, Fe = config.expert_ffn(), E = a.experts, k = a.top_k;
  const std::int64_t T = 512, B = N / T;
  if (rank == 0) {
    std::cout << "- per rank: " << N << " tokens (" << B << " x " << T << "), C " << C << ", " << E
              << " experts of width " << Fe << ", top " << k << ", ep " << ep << " (experts per rank " << E / ep
              << "), GELU experts, dropless\n"
              << "- dense baseline: one MLP of width " << k * Fe << " (the same active parameters per token)\n\n";
  }

  // The grouped GEMM alone (this rank's experts, balanced rows) vs one sgemm of the same FLOPs.
  Table gemm_table({"GEMM", "rows", "K", "N", "grouped GFLOP/s", "sgemm GFLOP/s", "grouped / sgemm"});
  {
    const std::int64_t El = E / ep, rows = N * k / ep;  // balanced: this rank's share of all rows
    Tensor x = Tensor::empty({rows, C}), w = Tensor::empty({El, Fe, C}), out = Tensor::empty({rows, Fe});
    fill_normal(x, 0.0f, 1.0f, 1, 1);
    fill_normal(w, 0.0f, 0.02f, 1, 2);
    std::vector<std::int64_t> offsets;
    for (std::int64_t g = 0; g <= El; ++g) offsets.push_back(rows * g / El);
    Tensor w0 = w.select(0, 0), out1 = Tensor::empty({rows, Fe});
    const PairedTiming t = time_paired([&] { grouped_matmul_forward({}, x, w, Tensor(), offsets, out); },
                                       [&] { matmul_forward(MatmulArgs{.transpose_b = true}, x, w0, out1); }, 5, 1.0);
    const double flops = 2.0 * static_cast<double>(rows * C * Fe);
    gemm_table.add_row({"expert fc (forward)", std::to_string(rows), std::to_string(C), std::to_string(Fe),
                        fmt(flops / t.first_median_s / 1e9), fmt(flops / t.second_median_s / 1e9),
                        percent(t.second_median_s / t.first_median_s)});
  }
  if (rank == 0) {
    gemm_table.print();
    std::cout << "\n";
  }

  // Inputs: unit-variance tokens (balanced routing), and the same tokens plus a shared component
  // along `direction`, which the skewed routers' favoured rows point at.
  Tensor h = Tensor::empty({B, T, C}), h_skewed = Tensor::empty({B, T, C});
  fill_normal(h, 0.0f, 1.0f, 7, static_cast<std::uint64_t>(rank));
  Tensor direction = Tensor::empty({C});
  fill_normal(direction, 0.0f, 1.0f, 8, 0);
  for (std::int64_t i = 0; i < N; ++i) {
    for (std::int64_t c = 0; c < C; ++c) {
      h_skewed.data<float>()[i * C + c] = h.data<float>()[i * C + c] + direction.data<float>()[c];
    }
  }
  const std::int64_t F = k * Fe;
  Tensor w_fc = Tensor::empty({F, C}), w_proj = Tensor::empty({C, F}), fc = Tensor::empty({N, F}),
         act = Tensor::empty({N, F}), y = Tensor::empty({N, C}), g_fc = Tensor::zeros({F, C}),
         g_proj = Tensor::zeros({C, F}), d_act = Tensor::empty({N, F}), d_fc = Tensor::empty({N, F}),
         d_h = Tensor::empty({N, C}), grad_y = Tensor::empty({N, C}), none;
  fill_normal(w_fc, 0.0f, 0.02f, 9, 1);
  fill_normal(w_proj, 0.0f, 0.02f, 9, 2);
  fill_normal(grad_y, 0.0f, 1e-3f, 9, 3);
  const Tensor hf = h.view({N, C});
  auto dense_step = [&] {
    nn::linear_forward(hf, w_fc, Tensor(), fc);
    gelu_forward(GeluArgs{}, fc, act);
    nn::linear_forward(act, w_proj, Tensor(), y);
    nn::linear_backward(act, w_proj, grad_y, d_act, false, g_proj, none);
    gelu_backward(GeluArgs{}, fc, d_act, d_fc);
    nn::linear_backward(hf, w_fc, d_fc, d_h, false, g_fc, none);
  };

  Table table({"routing", "load max/mean", "MoE fwd+bwd ms", "dense ms", "MoE / dense", "MoE tokens/s",
               "a2a bytes/token", "analytic", "a2a exposed ms"});
  parallel::ExpertParallelGroup group(*world);
  for (Routing routing : {Routing::balanced, Routing::hot_expert, Routing::hot_rank}) {
    if (routing == Routing::hot_rank && ep == 1) continue;  // one rank holds every expert
    nn::ParameterStore store;
    nn::ModelSplit split;
    if (ep > 1) split.ep = &group;
    nn::MoeLayer layer(config, split, 0, store);
    store.allocate();
    store.initialize(11);
    skew_router(store, direction, routing, static_cast<int>(E), ep);
    const Tensor& x = routing == Routing::balanced ? h : h_skewed;
    Tensor out = Tensor::empty({B, T, C}), grad_h = Tensor::empty({B, T, C});
    Tensor go = grad_y.view({B, T, C});
    nn::MoeActivations acts;
    // Load: the rows each expert computed, over all ranks (routed counts of every rank summed).
    acts.stats = Tensor::zeros({E + 3}, DType::f64);
    layer.forward(store, x, out, acts);
    Tensor total = Tensor::empty({E}, DType::i64);
    for (std::int64_t e = 0; e < E; ++e)
      total.data<std::int64_t>()[e] = static_cast<std::int64_t>(acts.stats.data<double>()[e]);
    world->all_reduce(total);
    std::int64_t most = 0, all = 0, remote = 0;
    for (std::int64_t e = 0; e < E; ++e) {
      most = std::max(most, total.data<std::int64_t>()[e]);
      all += total.data<std::int64_t>()[e];
    }
    for (std::int64_t e = 0; e < E; ++e) {
      if (e / (E / ep) != rank) remote += acts.offsets[e + 1] - acts.offsets[e];
    }
    for (int p = 0; p < static_cast<int>(acts.exchange.recv_rows.size()); ++p) {
      if (p != rank) remote += acts.exchange.recv_rows[static_cast<std::size_t>(p)];
    }
    layer.backward(store, x, acts, go, grad_h, {1.0f});
    auto moe_step = [&] {
      layer.forward(store, x, out, acts);
      layer.backward(store, x, acts, go, grad_h, {1.0f});
    };
    world->barrier();
    world->reset_stats();
    // Every MoE step is an all-to-all, so every rank must run the same number of pairs: the count
    // is set by the slowest rank's probe pair (also a warm-up), not by each rank's own clock.
    auto seconds_of = [](const auto& fn) {
      const auto start = std::chrono::steady_clock::now();
      fn();
      return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    };
    const double probe = seconds_of(moe_step) + seconds_of(dense_step);
    const std::vector<double> probes = distributed::gather_over_ranks(*world, probe);
    const double slowest_probe = std::max(*std::max_element(probes.begin(), probes.end()), 1e-6);
    const int pairs = std::clamp(static_cast<int>(std::ceil((a.quick ? 1.0 : 3.0) / slowest_probe)), 3, 1000);
    const PairedTiming t = time_paired(moe_step, dense_step, pairs, 0.0, pairs);
    const distributed::CommStats stats = world->stats();
    const double calls = static_cast<double>(t.pairs + 2);  // the probe and the warm-up calls are counted too
    const double group_tokens = static_cast<double>(N) * ep;
    const double bytes =
        distributed::sum_over_ranks(*world, static_cast<double>(stats[distributed::CommOp::all_to_all].bytes_sent)) /
        calls / group_tokens;
    const double analytic =
        distributed::sum_over_ranks(*world, 2.0 * static_cast<double>(remote) * C * 4.0) / group_tokens;
    const double exposed_ms = 1000.0 * stats[distributed::CommOp::all_to_all].wait_seconds / calls;
    // The slowest rank sets the pace: the maxima over ranks.
    const auto slowest = [&](double v) {
      const std::vector<double> all_v = distributed::gather_over_ranks(*world, v);
      return *std::max_element(all_v.begin(), all_v.end());
    };
    const double moe_s = slowest(t.first_median_s), dense_s = slowest(t.second_median_s);
    table.add_row({routing_name(routing), fmt(static_cast<double>(most) / (static_cast<double>(all) / E), 2),
                   fmt(1000 * moe_s, 1), fmt(1000 * dense_s, 1), fmt(moe_s / dense_s, 2),
                   fmt(static_cast<double>(N * ep) / moe_s, 0), fmt(bytes, 0), fmt(analytic, 0),
                   fmt(slowest(exposed_ms), 2)});
  }
  if (rank == 0) {
    table.print();
    std::cout << "\nBars (balanced routing, top 2 of 8 experts): grouped / sgemm >= 80%; MoE / dense <= 1.5.\n";
  }
  return 0;
}
