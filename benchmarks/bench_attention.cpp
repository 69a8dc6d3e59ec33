// bench_attention: blocked causal attention (forward, forward + backward) against the sgemm of the
// CPU ops' GEMM (ops/cpu_gemm.h: the GEMM the attention's own blocks run on) measured in the same
// run, with the peak extra memory of each call.
//
// Sweeps T = 256 .. 8192 at B = 1, H = 12, D = 64 (GPT-2 small heads; --batch, --heads, --head-dim
// set another shape, e.g. the planned model's), f32, causal. q, k, v are
// strided views of one (B, T, 3 * H * D) QKV activation and out / grads are (B, T, H, D) permuted,
// as the model lays them out, so the kernels read them in place. Before timing, forward (all
// heads) and backward (two heads) at T = 256 are checked against an unblocked float64 attention
// (full T x T scores). Peak memory: /proc/self/clear_refs resets VmHWM, then the call (which
// allocates its outputs) runs once and VmHWM minus the RSS before the call is reported; a T x T
// score matrix per head would add B * H * T^2 * 4 bytes.
// --sparse runs the block-sparse table instead: H = 4 heads, block 64, a fixed layout of 8 kept
// blocks per query block (the diagonal one, a window of 5, 2 global sinks), T = 4k .. 256k
// (--sparse-min, --sparse-max), forward + backward against dense attention at the same T up to
// --dense-max (16k: dense grows 4x per doubling),
// with each row's time over the previous row's (linear growth: 2x per doubling of T).
// --profile FILE merges compute.attention_flops_per_s into a machine profile (machine_profile.h):
// the forward + backward rate (FLOPs as in the table: 3.5 x the causal forward) of the first row
// (T = --min-t), with the shape it ran at (compute.attention_shape).
// Usage: OMP_NUM_THREADS=2 bench_attention [--quick] [--min-t T] [--max-t T] [--block-q N] [--block-k N]
//        [--batch B] [--heads H] [--head-dim D] [--profile FILE]
//        OMP_NUM_THREADS=2 bench_attention --sparse [--sparse-min T] [--sparse-max T] [--dense-max T]
#include <malloc.h>

#include <cmath>
#include <cstring>
#include <iostream>
#include <limits>

#include "harness.h"
#include "machine_profile.h"
#include "myriad/core/philox.h"
#include "myriad/ops/attention.h"
#include "myriad/ops/cpu_gemm.h"

using namespace myriad;
using namespace myriad::bench;

namespace {

// The dense table's attention shape (--batch, --heads, --head-dim): GPT-2 small's heads by default.
struct AttentionShape {
  std::int64_t B = 1, H = 12, D = 64;
};

// q, k, v views of a (B, T, 3 * H * D) activation, each (B, H, T, D) with row stride 3 * H * D.
struct Qkv {
  Tensor qkv, q, k, v;
  Qkv(const AttentionShape& s, std::int64_t T, std::uint64_t seed) : qkv(Tensor::empty({s.B, T, 3 * s.H * s.D})) {
    fill_uniform(qkv, -1, 1, seed, 0);
    Tensor split = qkv.view({s.B, T, 3, s.H, s.D});
    q = split.select(2, 0).permute({0, 2, 1, 3});
    k = split.select(2, 1).permute({0, 2, 1, 3});
    v = split.select(2, 2).permute({0, 2, 1, 3});
  }
};

// A (B, H, T, D) view of a fresh (B, T, H, D) tensor.
Tensor heads_tensor(const AttentionShape& s, std::int64_t T) {
  return Tensor::empty({s.B, T, s.H, s.D}).permute({0, 2, 1, 3});
}

// A contiguous copy of a (1, H, T, D) tensor for the reference.
struct Dense {
  Tensor t;
  const float* p;
  std::int64_t T, D;
  explicit Dense(const Tensor& x) : t(x.contiguous()), p(t.data<float>()), T(x.size(2)), D(x.size(3)) {}
  double at(std::int64_t h, std::int64_t i, std::int64_t d) const { return p[(h * T + i) * D + d]; }
};

// Unblocked float64 causal attention of head h: probabilities (T x T), out, and if grad_out is
// given the gradients of sum(out * grad_out). Returns the max |difference| against the op's tensors.
struct HeadCheck {
  double out = 0, lse = 0, grad_q = 0, grad_k = 0, grad_v = 0;
};

HeadCheck check_head(const Dense& q, const Dense& k, const Dense& v, std::int64_t h, const Dense& out,
                     const Tensor& lse, const Dense* grad_out, const Dense& gq, const Dense& gk, const Dense& gv) {
  const std::int64_t T = q.T, dim = q.D;
  const double scale = 1.0 / std::sqrt(static_cast<double>(dim));
  std::vector<double> p(T * T, 0.0);
  HeadCheck diff;
  for (std::int64_t i = 0; i < T; ++i) {
    double mx = -std::numeric_limits<double>::infinity();
    for (std::int64_t j = 0; j <= i; ++j) {
      double s = 0;
      for (std::int64_t d = 0; d < dim; ++d) s += q.at(h, i, d) * k.at(h, j, d);
      p[i * T + j] = scale * s;
      mx = std::max(mx, scale * s);
    }
    double sum = 0;
    for (std::int64_t j = 0; j <= i; ++j) sum += std::exp(p[i * T + j] - mx);
    for (std::int64_t j = 0; j <= i; ++j) p[i * T + j] = std::exp(p[i * T + j] - mx) / sum;
    diff.lse = std::max(diff.lse, std::fabs(mx + std::log(sum) - lse.data<float>()[h * T + i]));
    for (std::int64_t d = 0; d < dim; ++d) {
      double o = 0;
      for (std::int64_t j = 0; j <= i; ++j) o += p[i * T + j] * v.at(h, j, d);
      diff.out = std::max(diff.out, std::fabs(o - out.at(h, i, d)));
    }
  }
  if (grad_out == nullptr) return diff;
  std::vector<double> dq(T * dim, 0.0), dk(T * dim, 0.0), dv(T * dim, 0.0), dp(T);
  for (std::int64_t i = 0; i < T; ++i) {
    double row = 0;
    for (std::int64_t j = 0; j <= i; ++j) {
      double s = 0;
      for (std::int64_t d = 0; d < dim; ++d) s += grad_out->at(h, i, d) * v.at(h, j, d);
      dp[j] = s;
      row += p[i * T + j] * s;
    }
    for (std::int64_t j = 0; j <= i; ++j) {
      const double ds = p[i * T + j] * (dp[j] - row);
      for (std::int64_t d = 0; d < dim; ++d) {
        dv[j * dim + d] += p[i * T + j] * grad_out->at(h, i, d);
        dq[i * dim + d] += scale * ds * k.at(h, j, d);
        dk[j * dim + d] += scale * ds * q.at(h, i, d);
      }
    }
  }
  for (std::int64_t i = 0; i < T; ++i)
    for (std::int64_t d = 0; d < dim; ++d) {
      diff.grad_q = std::max(diff.grad_q, std::fabs(dq[i * dim + d] - gq.at(h, i, d)));
      diff.grad_k = std::max(diff.grad_k, std::fabs(dk[i * dim + d] - gk.at(h, i, d)));
      diff.grad_v = std::max(diff.grad_v, std::fabs(dv[i * dim + d] - gv.at(h, i, d)));
    }
  return diff;
}

// Checks batch 1 of the shape's heads (the reference reads one sequence).
bool check_correctness(const AttentionArgs& args, AttentionShape s) {
  const std::int64_t T = 256, heads = s.H;
  s.B = 1;
  Qkv x(s, T, 7);
  Tensor out = heads_tensor(s, T), lse = Tensor::empty({s.B, s.H, T});
  attention_forward(args, x.q, x.k, x.v, out, lse);
  Tensor grad_out = heads_tensor(s, T);
  fill_uniform(grad_out, -1, 1, 7, 1);
  Tensor gq = heads_tensor(s, T), gk = heads_tensor(s, T), gv = heads_tensor(s, T);
  attention_backward(args, x.q, x.k, x.v, out, lse, grad_out, gq, gk, gv);
  const Dense dq(x.q), dk(x.k), dv(x.v), dout(out), dgrad_out(grad_out), dgq(gq), dgk(gk), dgv(gv);
  HeadCheck worst;
  for (std::int64_t h = 0; h < heads; ++h) {
    const bool with_backward = h == 0 || h == heads - 1;
    HeadCheck c = check_head(dq, dk, dv, h, dout, lse, with_backward ? &dgrad_out : nullptr, dgq, dgk, dgv);
    worst.out = std::max(worst.out, c.out);
    worst.lse = std::max(worst.lse, c.lse);
    worst.grad_q = std::max(worst.grad_q, c.grad_q);
    worst.grad_k = std::max(worst.grad_k, c.grad_k);
    worst.grad_v = std::max(worst.grad_v, c.grad_v);
  }
  const double tolerance = 2e-5;
  const bool ok = worst.out < tolerance && worst.lse < tolerance && worst.grad_q < tolerance &&
                  worst.grad_k < tolerance && worst.grad_v < tolerance;
  std::cout << "- correctness at T=256 vs unblocked float64 (max abs diff, tolerance " << tolerance << "): out "
            << worst.out << ", lse " << worst.lse << " (" << heads << " heads); grad_q " << worst.grad_q << ", grad_k "
            << worst.grad_k << ", grad_v " << worst.grad_v << " (heads 0 and " << heads - 1 << ") -> "
            << (ok ? "OK" : "MISMATCH") << "\n";
  return ok;
}

// GFLOP/s of a square n x n x n sgemm on the CPU ops' GEMM (all OpenMP threads).
double sgemm_gflops(std::int64_t n) {
  Tensor a = Tensor::empty({n, n}), b = Tensor::empty({n, n}), c = Tensor::empty({n, n});
  fill_uniform(a, -1, 1, 3, 0);
  fill_uniform(b, -1, 1, 3, 1);
  Timing t = time_it(
      [&] {
        cpu::sgemm(false, false, n, n, n, 1.0f, a.data<float>(), n, b.data<float>(), n, 0.0f, c.data<float>(), n);
      },
      2, 5, 0.5);
  return 2.0 * n * n * n / t.median_s / 1e9;
}

// Peak RSS above the RSS before fn, in bytes (fn's own allocations included).
double peak_extra_bytes(const std::function<void()>& fn) {
  const bool reset = reset_peak_rss();
  const double before = static_cast<double>(current_rss_bytes());
  fn();
  if (!reset) return std::nan("");
  return static_cast<double>(peak_rss_bytes()) - before;
}

// The block-sparse table (see the top of the file). This machine's timings drift by +-25% over a
// minute (a shared host), so the sizes are timed in 3 interleaved rounds of >= 3 calls each and
// each size reports its fastest call: the least disturbed measurement of the same work, which a
// slow spell cannot land on one size only.
void run_sparse(std::int64_t min_t, std::int64_t max_t, std::int64_t dense_max) {
  constexpr std::int64_t kHeads = 4, kBlock = 64, kD = 64;
  constexpr int kRounds = 3;
  const FixedBlockPattern pattern{.local_blocks = 5, .global_blocks = 2};
  std::cout << "- block-sparse: B=1 H=" << kHeads << " D=" << kD << " causal, block " << kBlock
            << ", fixed layout: diagonal + window of " << pattern.local_blocks << " + " << pattern.global_blocks
            << " global blocks (8 per query block once past the start); dense = the same op without a layout\n";
  struct Size {
    std::int64_t T;
    Tensor q, k, v, grad_out, out, lse, gq, gk, gv;
    BlockLayout layout;
    double fwd_s = 1e30, both_s = 1e30, dense_s = 0.0, mem = 0.0;
  };
  std::vector<Size> sizes;
  for (std::int64_t T = min_t; T <= max_t; T *= 2) {
    Size z;
    z.T = T;
    for (Tensor* t : {&z.q, &z.k, &z.v, &z.grad_out, &z.out, &z.gq, &z.gk, &z.gv})
      *t = Tensor::empty({1, kHeads, T, kD});
    int stream = 0;
    for (Tensor* t : {&z.q, &z.k, &z.v, &z.grad_out}) fill_uniform(*t, -1, 1, 5, stream++);
    z.lse = Tensor::empty({1, kHeads, T});
    z.layout = fixed_block_layout(pattern, T, kBlock);
    sizes.push_back(std::move(z));
  }
  auto forward = [](Size& z, const AttentionArgs& a) { attention_forward(a, z.q, z.k, z.v, z.out, z.lse); };
  auto both = [&](Size& z, const AttentionArgs& a) {
    forward(z, a);
    attention_backward(a, z.q, z.k, z.v, z.out, z.lse, z.grad_out, z.gq, z.gk, z.gv);
  };
  for (int round = 0; round < kRounds; ++round) {
    for (Size& z : sizes) {
      const AttentionArgs sparse{.layout = &z.layout};
      z.fwd_s = std::min(z.fwd_s, time_it([&] { forward(z, sparse); }, 1, 3, 1.0).min_s);
      z.both_s = std::min(z.both_s, time_it([&] { both(z, sparse); }, 1, 3, 1.0).min_s);
    }
  }
  for (Size& z : sizes) {
    const AttentionArgs sparse{.layout = &z.layout};
    z.mem = peak_extra_bytes([&] {
      Tensor o = Tensor::empty(z.q.shape()), l = Tensor::empty({1, kHeads, z.T});
      Tensor a = Tensor::empty(z.q.shape()), b = Tensor::empty(z.q.shape()), c = Tensor::empty(z.q.shape());
      attention_forward(sparse, z.q, z.k, z.v, o, l);
      attention_backward(sparse, z.q, z.k, z.v, o, l, z.grad_out, a, b, c);
    });
    if (z.T <= dense_max) z.dense_s = time_it([&] { both(z, AttentionArgs{}); }, 1, 2, 0.5).min_s;
  }
  Table table({"T", "kept blocks / query block", "sparse fwd ms", "sparse fwd+bwd ms", "vs previous T",
               "dense fwd+bwd ms", "dense / sparse", "sparse fwd+bwd peak extra"});
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const Size& z = sizes[i];
    const double per_row = static_cast<double>(z.layout.kept_blocks()) / static_cast<double>(z.layout.query_blocks);
    table.add_row({std::to_string(z.T), fmt(per_row, 2), fmt(1e3 * z.fwd_s, 1), fmt(1e3 * z.both_s, 1),
                   i > 0 ? fmt(z.both_s / sizes[i - 1].both_s, 2) + "x" : "-",
                   z.dense_s > 0 ? fmt(1e3 * z.dense_s, 1) : "-",
                   z.dense_s > 0 ? fmt(z.dense_s / z.both_s, 1) + "x" : "-", bytes_human(z.mem)});
  }
  std::cout << "\n";
  table.print();
  std::cout << "\nSparse: the fastest call of " << kRounds
            << " interleaved rounds of >= 3 calls over >= 1 s;\n"
               "dense: the fastest of >= 2 calls. Peak extra as in the dense table: the call's outputs (out, "
               "lse,\n3 gradients = 4 x B*H*T*D floats) plus scratch; nothing of T x T.\n";
}

}  // namespace

static int run(int argc, char** argv) {
  // Fixed threshold: every buffer of 1 MiB or more is its own mapping, returned to the system when
  // freed, so each call's peak RSS counts its own allocations (glibc otherwise raises the
  // threshold after the first free and serves later buffers from already-resident heap). Fixing it
  // also fixes glibc's trim threshold, at 128 KiB: the OpenMP workers' arenas then handed the GEMM's
  // packing buffers back with madvise after every call (14k madvise calls, page faults and TLB
  // shootdowns in one T 1024 run: the attention timed 44 ms instead of 26-28). The heap below 1 MiB
  // is therefore never trimmed; it holds no buffer the peak counts.
  mallopt(M_MMAP_THRESHOLD, 1 << 20);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  bool quick = false, sparse = false;
  std::int64_t min_t = 256, max_t = 8192, sparse_min = 4096, sparse_max = 262144, dense_max = 16384;
  AttentionArgs args;
  AttentionShape shape;
  std::string profile;
  try {  // a bad command line exits 2 naming the option, before anything is measured
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--quick") == 0)
        quick = true;
      else if (std::strcmp(argv[i], "--min-t") == 0 && i + 1 < argc)
        min_t = whole_option("--min-t", argv[++i]);
      else if (std::strcmp(argv[i], "--max-t") == 0 && i + 1 < argc)
        max_t = whole_option("--max-t", argv[++i]);
      else if (std::strcmp(argv[i], "--sparse") == 0)
        sparse = true;
      else if (std::strcmp(argv[i], "--sparse-min") == 0 && i + 1 < argc)
        sparse_min = whole_option("--sparse-min", argv[++i]);
      else if (std::strcmp(argv[i], "--sparse-max") == 0 && i + 1 < argc)
        sparse_max = whole_option("--sparse-max", argv[++i]);
      else if (std::strcmp(argv[i], "--dense-max") == 0 && i + 1 < argc)
        dense_max = whole_option("--dense-max", argv[++i]);
      else if (std::strcmp(argv[i], "--block-q") == 0 && i + 1 < argc)
        args.block_q = static_cast<int>(whole_option("--block-q", argv[++i]));
      else if (std::strcmp(argv[i], "--block-k") == 0 && i + 1 < argc)
        args.block_k = static_cast<int>(whole_option("--block-k", argv[++i]));
      else if (std::strcmp(argv[i], "--profile") == 0 && i + 1 < argc)
        profile = argv[++i];
      else if (std::strcmp(argv[i], "--batch") == 0 && i + 1 < argc)
        shape.B = whole_option("--batch", argv[++i]);
      else if (std::strcmp(argv[i], "--heads") == 0 && i + 1 < argc)
        shape.H = whole_option("--heads", argv[++i]);
      else if (std::strcmp(argv[i], "--head-dim") == 0 && i + 1 < argc)
        shape.D = whole_option("--head-dim", argv[++i]);
      else {
        std::cerr << "usage: bench_attention [--quick] [--min-t T] [--max-t T] [--block-q N] [--block-k N] "
                     "[--batch B] [--heads H] [--head-dim D] [--profile FILE]\n"
                     "       bench_attention --sparse [--sparse-min T] [--sparse-max T] [--dense-max T]\n";
        return 2;
      }
    }
    if (quick) max_t = std::min<std::int64_t>(max_t, 2048);
    MYRIAD_CHECK(!sparse || profile.empty(), "--profile: --sparse writes no profile (the dense table does)");
    MYRIAD_CHECK(sparse || min_t <= max_t, "--min-t " << min_t << " is above --max-t " << max_t
                                                      << (quick ? " (2048 with --quick)" : "") << ": no row to time");
    MYRIAD_CHECK(!sparse || sparse_min <= sparse_max,
                 "--sparse-min " << sparse_min << " is above --sparse-max " << sparse_max << ": no row to time");
  } catch (const Error& e) {
    std::cerr << "bench_attention: " << e.message() << "\n";
    return 2;
  }
  if (!profile.empty()) myriad::bench::check_profile_writable(profile);  // before the measurements
  if (sparse) {
    print_header("bench_attention --sparse: block-sparse vs dense causal attention (fp32)", argc, argv);
    run_sparse(sparse_min, sparse_max, dense_max);
    return 0;
  }
  print_header("bench_attention: blocked causal attention vs the CPU GEMM's sgemm (fp32)", argc, argv);
  std::cout << "- the CPU GEMM (the attention's blocks and the sgemm column): "
            << cpu::gemm_library_description(cpu::gemm_library()) << "\n";
  auto block = [](int b) { return b > 0 ? std::to_string(b) : std::string("auto"); };
  if (shape.B < 1 || shape.H < 1 || shape.D < 1) {
    std::cerr << "bench_attention: --batch, --heads and --head-dim must be >= 1\n";
    return 2;
  }
  std::cout << "- shape: B=" << shape.B << " H=" << shape.H << " D=" << shape.D
            << ", causal, block_q=" << block(args.block_q) << " block_k=" << block(args.block_k)
            << " (auto: 128 below T=2048, 256 from there), q/k/v strided views of a (B, T, 3*H*D) activation\n";
  const bool ok = check_correctness(args, shape);

  Table table({"T", "sgemm GFLOP/s", "fwd ms", "fwd GFLOP/s", "fwd / sgemm", "fwd+bwd ms", "fwd+bwd GFLOP/s",
               "fwd+bwd / sgemm", "fwd peak extra", "bwd peak extra", "T x T scores would be"});
  struct Row {
    std::int64_t T;
    double sgemm_rate, fwd_s, both_s, fwd_mem, bwd_mem;
  };
  std::vector<Row> rows;
  for (std::int64_t T = min_t; T <= max_t; T *= 2) {
    Qkv x(shape, T, 11);
    Tensor out = heads_tensor(shape, T), lse = Tensor::empty({shape.B, shape.H, T});
    Tensor grad_out = heads_tensor(shape, T);
    fill_uniform(grad_out, -1, 1, 11, 1);
    Tensor gq = heads_tensor(shape, T), gk = heads_tensor(shape, T), gv = heads_tensor(shape, T);
    auto forward = [&] { attention_forward(args, x.q, x.k, x.v, out, lse); };
    auto both = [&] {
      forward();
      attention_backward(args, x.q, x.k, x.v, out, lse, grad_out, gq, gk, gv);
    };
    // The machine may be shared: sgemm is measured next to each row, and the row uses the better
    // of the two sgemm rates around it (a conservative ratio).
    const int min_repeats = T >= 4096 ? 3 : 5;
    const double sgemm_before = sgemm_gflops(1024);
    Timing tf = time_it(forward, 1, min_repeats, 0.5);
    Timing tb = time_it(both, 1, min_repeats, 0.5);
    const double sgemm = std::max(sgemm_before, sgemm_gflops(1024));
    // Memory: each call allocates what it writes, as a layer would.
    const double fwd_mem = peak_extra_bytes([&] {
      Tensor o = heads_tensor(shape, T), l = Tensor::empty({shape.B, shape.H, T});
      attention_forward(args, x.q, x.k, x.v, o, l);
    });
    const double bwd_mem = peak_extra_bytes([&] {
      Tensor a = heads_tensor(shape, T), b = heads_tensor(shape, T), c = heads_tensor(shape, T);
      attention_backward(args, x.q, x.k, x.v, out, lse, grad_out, a, b, c);
    });
    rows.push_back({T, sgemm, tf.median_s, tb.median_s, fwd_mem, bwd_mem});
  }
  for (const Row& r : rows) {
    const double fwd_flops = 2.0 * shape.B * shape.H * static_cast<double>(r.T) * r.T * shape.D;
    const double both_flops = 3.5 * fwd_flops;
    const double gf = fwd_flops / r.fwd_s / 1e9, gb = both_flops / r.both_s / 1e9;
    table.add_row({std::to_string(r.T), fmt(r.sgemm_rate), fmt(1e3 * r.fwd_s, 2), fmt(gf), percent(gf / r.sgemm_rate),
                   fmt(1e3 * r.both_s, 2), fmt(gb), percent(gb / r.sgemm_rate), bytes_human(r.fwd_mem),
                   bytes_human(r.bwd_mem), bytes_human(4.0 * shape.B * shape.H * static_cast<double>(r.T) * r.T)});
  }
  std::cout << "\n";
  table.print();
  std::cout
      << "\nFLOPs (causal half of the scores): forward = 2 matmuls * 2*B*H*T^2*D * 1/2 = 2*B*H*T^2*D;\n"
         "backward = 2.5 * forward (5 matmuls); fwd+bwd = 3.5 * forward. Times are medians of >= 3 repeats.\n"
         "sgemm = the CPU GEMM's 1024x1024x1024 on all threads, the better of two runs just before and after the row.\n"
         "Peak extra = VmHWM after the call minus RSS before it (the call allocates its outputs: out + lse,\n"
         "or grad_q + grad_k + grad_v; buffers >= 1 MiB are mmapped), after /proc/self/clear_refs reset the peak.\n";
  if (!profile.empty() && !rows.empty()) {
    const Row& r = rows.front();
    const double both_flops = 3.5 * 2.0 * shape.B * shape.H * static_cast<double>(r.T) * r.T * shape.D;
    merge_machine_profile(
        profile, "bench_attention",
        {{"compute.attention_flops_per_s", both_flops / r.both_s},
         {"compute.attention_shape",
          {{"B", shape.B}, {"H", shape.H}, {"D", shape.D}, {"T", r.T}, {"pass", "forward + backward, causal, f32"}}}},
        argc, argv);
    std::cout << "\nprofile: " << profile << " (attention at T=" << r.T << ": " << fmt(both_flops / r.both_s / 1e9)
              << " GFLOP/s merged)\n";
  }
  return ok ? 0 : 1;
}

int main(int argc, char** argv) {
  return myriad::bench::run_reporting_errors("bench_attention", [&] { return run(argc, argv); });
}
