// bench_gemm: myriad's matmul against calling OpenBLAS sgemm directly on the same buffers, and
// against the machine's fp32 peak measured in the same run: register FMA chains on vectors of the
// widest ISA the CPU offers (AVX-512 when present; the ISA and the OpenBLAS kernel are printed in
// the header), so 'myriad / peak' stays <= 100% whichever kernel OpenBLAS picks.
//
// Sweeps square sizes 256..4096 and the forward GEMMs of a transformer layer with M = B*T tokens
// and width C (default GPT-2 small: C 768, V 50304): K = C with N = C (attention projection), 3C
// (QKV), 4C (MLP up) and V (LM head), and K = 4C, N = C (MLP down), in the layout the model uses
// (activations (B, T, K) times a weight stored (N, K), transposed).
// Before timing, each case checks that both paths produce the same numbers.
// Then the engine's ops at the model's shapes (model_op_rates.h: GEMMs forward + backward, and the
// planner's memory class: layernorm, residual add, GELU) and a STREAM-like copy / triad over
// --stream-mib MiB arrays (default 64: beyond the caches).
// --profile FILE merges into a machine profile (machine_profile.h): peak_flops_per_s = the
// measured register FMA peak; compute.matmul_flops_per_s = the GEMMs forward + backward at the
// model's shapes (compute.matmul_forward_flops_per_s: the table's forward cases together;
// compute.matmul_flops_per_s_by_tp: the same GEMMs on one rank of a tp 2, 4, 8 split);
// compute.memory_bytes_per_s / activation_bytes_per_s / optimizer_bytes_per_s = the norms + adds,
// the GELU and AdamW in the planner's byte count (compute.stream: the STREAM figures,
// informative); threads = the OpenMP threads every rate ran on.
// --libraries instead times the CPU GEMM libraries the machine has (OpenBLAS, and oneDNN / BLIS when
// installed: gemm_libraries.h) on each linear layer's forward, input-gradient and weight-gradient
// GEMMs at tokens / 8 and tokens rows, beside cpu::sgemm (the CPU ops' entry point: the process's
// library with its per-thread cuts) and its ratio to OpenBLAS, then those of one training step
// (--layers blocks, 12 by default, and the LM head) summed per library: the ceiling of
// bench_train_step's "model / sgemm".
// Usage: OMP_NUM_THREADS=2 bench_gemm [--quick] [--tokens M] [--embd C] [--vocab V] [--profile FILE]
//        [--stream-mib N] [--libraries [--layers L]]
#include <cblas.h>
#include <omp.h>

#include <cmath>
#include <cstring>
#include <iostream>

#include "gemm_libraries.h"
#include "myriad/ops/cpu_gemm.h"
#include "harness.h"
#include "machine_profile.h"
#include "model_op_rates.h"
#include "myriad/core/philox.h"
#include "myriad/ops/matmul.h"
#include "myriad/train/metrics/peak_flops.h"

using namespace myriad;
using namespace myriad::bench;

namespace {

struct GemmCase {
  std::string name;
  Shape a_shape;  // (..., M, K)
  std::int64_t n;
  bool transpose_b;  // b stored (N, K)
};

double max_relative_difference(const Tensor& x, const Tensor& y) {
  const float* a = x.data<float>();
  const float* b = y.data<float>();
  double scale = 0, diff = 0;
  for (std::int64_t i = 0; i < x.numel(); ++i) {
    scale = std::max(scale, static_cast<double>(std::fabs(b[i])));
    diff = std::max(diff, static_cast<double>(std::fabs(a[i] - b[i])));
  }
  return diff / std::max(scale, 1e-30);
}

}  // namespace

static int run(int argc, char** argv) {
  bool quick = false;
  std::int64_t tokens = 2048, embd = 768, vocab = 50304, layers = 12;
  std::string profile;
  double stream_mib = 64;
  bool libraries = false, layers_given = false;
  try {  // a bad command line exits 2 naming the option, before anything is measured
    for (int i = 1; i < argc; ++i) {
      if (std::strcmp(argv[i], "--quick") == 0)
        quick = true;
      else if (std::strcmp(argv[i], "--tokens") == 0 && i + 1 < argc)
        tokens = whole_option("--tokens", argv[++i]);
      else if (std::strcmp(argv[i], "--embd") == 0 && i + 1 < argc)
        embd = whole_option("--embd", argv[++i]);
      else if (std::strcmp(argv[i], "--vocab") == 0 && i + 1 < argc)
        vocab = whole_option("--vocab", argv[++i]);
      else if (std::strcmp(argv[i], "--profile") == 0 && i + 1 < argc)
        profile = argv[++i];
      else if (std::strcmp(argv[i], "--stream-mib") == 0 && i + 1 < argc)
        stream_mib = static_cast<double>(whole_option("--stream-mib", argv[++i]));
      else if (std::strcmp(argv[i], "--libraries") == 0)
        libraries = true;
      else if (std::strcmp(argv[i], "--layers") == 0 && i + 1 < argc)
        layers_given = true, layers = whole_option("--layers", argv[++i]);
      else {
        std::cerr << "usage: bench_gemm [--quick] [--tokens M] [--embd C] [--vocab V] [--profile FILE] "
                     "[--stream-mib N] [--libraries [--layers L]]\n";
        return 2;
      }
    }
    // --tokens rows come as B x T with B = 4 (and tokens / 8 for --libraries' few-row GEMMs).
    MYRIAD_CHECK(tokens >= 8 && tokens % 8 == 0, "--tokens " << tokens << " must be a multiple of 8 (>= 8)");
    MYRIAD_CHECK(!layers_given || libraries, "--layers sizes --libraries' step summary; without it nothing reads it");
    MYRIAD_CHECK(profile.empty() || !libraries,
                 "--profile: --libraries compares libraries and writes no profile (the default tables do)");
  } catch (const Error& e) {
    std::cerr << "bench_gemm: " << e.message() << "\n";
    return 2;
  }
  if (!profile.empty()) myriad::bench::check_profile_writable(profile);  // before minutes of measuring
  if (libraries) {  // the machine's GEMM libraries side by side, then nothing else
    print_header("bench_gemm --libraries: OpenBLAS vs oneDNN vs BLIS sgemm, and cpu::sgemm (fp32, row-major)", argc,
                 argv);
    const std::vector<std::int64_t> token_counts{tokens / 8, tokens};
    const std::vector<GemmShape> shapes = step_gemm_shapes(token_counts, embd, vocab);
    const GemmLibraryTimes found = print_gemm_libraries(shapes, quick ? 3 : 7);
    std::cout << "\n- libraries found: " << found.names.size() - 1
              << " (oneDNN: libdnnl.so.2/3, BLIS: libblis.so.4, by dlopen);"
              << " each cell the best of " << (quick ? 3 : 7)
              << " rounds alternated between the libraries; token rows = tokens / 8 and tokens; the CPU ops call "
                 "cpu::sgemm, the last column: "
              << cpu::gemm_library_description(cpu::gemm_library())
              << " (MYRIAD_CPU_GEMM), few-row and vocabulary-sized GEMMs cut into one call per thread\n";
    if (const std::string blis = myriad::bench::describe_blis(); !blis.empty()) std::cout << "- " << blis << "\n";
    print_step_gemm_ceiling(shapes, found, token_counts, layers);
    return 0;
  }
  print_header("bench_gemm: myriad matmul vs direct OpenBLAS sgemm (fp32)", argc, argv);
  std::cout << "- myriad's CPU GEMM: " << cpu::gemm_library_description(cpu::gemm_library()) << " (MYRIAD_CPU_GEMM)\n";
  const train::RegisterPeak measured = train::measure_fma_peak_flops(train::widest_vector_isa(), 0.5);
  const double peak = measured.flops_per_second / 1e9;
  const train::PeakFlops datasheet = train::find_peak_flops(false, 0.0);
  std::cout << "- measured fp32 FMA peak (" << measured.threads << " threads x " << measured.chains << " independent "
            << train::describe_vector_isa(measured.isa) << " chains): " << fmt(peak, 1) << " GFLOP/s\n"
            << "- datasheet estimate (the MFU denominator without logging.peak_tflops): "
            << fmt(datasheet.datasheet / 1e9, 1) << " GFLOP/s = " << datasheet.datasheet_source << "\n\n";

  std::vector<GemmCase> cases;
  std::vector<std::int64_t> squares =
      quick ? std::vector<std::int64_t>{256, 512, 1024} : std::vector<std::int64_t>{256, 512, 1024, 2048, 4096};
  cases.reserve(squares.size() + 5);  // the squares, then the 5 transformer shapes below
  for (std::int64_t s : squares) cases.push_back({"square " + std::to_string(s), {s, s}, s, false});
  const std::size_t first_model_case = cases.size();
  std::int64_t batch = 4, seq = tokens / 4;
  for (std::int64_t n : {embd, 3 * embd, 4 * embd, vocab}) {
    if (quick && n == vocab && vocab > 4 * embd) continue;
    cases.push_back({"B*T=" + std::to_string(tokens) + " K=" + std::to_string(embd) + " N=" + std::to_string(n),
                     {batch, seq, embd},
                     n,
                     true});
  }
  cases.push_back({"B*T=" + std::to_string(tokens) + " K=" + std::to_string(4 * embd) + " N=" + std::to_string(embd),
                   {batch, seq, 4 * embd},
                   embd,
                   true});
  double model_flops = 0, model_seconds = 0;
  nlohmann::json gemm_sizes = nlohmann::json::array();

  Table table({"case", "M", "N", "K", "direct GFLOP/s", "myriad GFLOP/s", "myriad / direct", "myriad / peak"});
  bool all_ok = true;
  for (std::size_t index = 0; index < cases.size(); ++index) {
    const GemmCase& c = cases[index];
    const std::int64_t k = c.a_shape.back();
    const std::int64_t m = shape_numel(c.a_shape) / k;
    Tensor a = Tensor::empty(c.a_shape);
    Tensor b = c.transpose_b ? Tensor::empty({c.n, k}) : Tensor::empty({k, c.n});
    fill_uniform(a, -1, 1, 1, 0);
    fill_uniform(b, -1, 1, 1, 1);
    Shape out_shape(c.a_shape.begin(), c.a_shape.end() - 1);
    out_shape.push_back(c.n);
    Tensor ours = Tensor::empty(out_shape), direct = Tensor::empty(out_shape);
    MatmulArgs args{.transpose_b = c.transpose_b};
    auto run_ours = [&] { matmul_forward(args, a, b, ours); };
    auto run_direct = [&] {
      cblas_sgemm(CblasRowMajor, CblasNoTrans, c.transpose_b ? CblasTrans : CblasNoTrans, static_cast<int>(m),
                  static_cast<int>(c.n), static_cast<int>(k), 1.0f, a.data<float>(), static_cast<int>(k),
                  b.data<float>(), static_cast<int>(c.transpose_b ? k : c.n), 0.0f, direct.data<float>(),
                  static_cast<int>(c.n));
    };
    run_ours();
    run_direct();
    double diff = max_relative_difference(ours, direct);
    if (diff > 1e-5) {
      std::cerr << "MISMATCH in " << c.name << ": max relative difference " << diff << "\n";
      all_ok = false;
    }
    // Paired alternation: each repeat times one direct call then one myriad call, so drift in the
    // (virtualised, noisy) machine affects both paths alike; each path's time is its median.
    PairedTiming t = time_paired(run_direct, run_ours, 10, 1.5);
    double t_direct = t.first_median_s, t_ours = t.second_median_s;
    double flops = 2.0 * m * c.n * k;
    double g_direct = flops / t_direct / 1e9, g_ours = flops / t_ours / 1e9;
    table.add_row({c.name, std::to_string(m), std::to_string(c.n), std::to_string(k), fmt(g_direct), fmt(g_ours),
                   percent(g_ours / g_direct), percent(g_ours / peak)});
    if (index >= first_model_case) {
      model_flops += flops;
      model_seconds += t_ours;
      gemm_sizes.push_back({{"m", m}, {"n", c.n}, {"k", k}, {"flops_per_s", flops / t_ours}});
    }
  }
  table.print();
  std::cout << "\nGFLOP/s = 2*M*N*K / time; time = median over >= 10 paired repeats (direct and myriad alternating "
               "call by call).\n";
  const StreamRates stream = measure_stream(stream_mib * 1048576.0);
  std::cout << "\nSTREAM-like, " << omp_get_max_threads() << " threads, arrays of " << bytes_human(stream.array_bytes)
            << ": copy " << fmt(stream.copy_bytes_per_s / 1e9, 2) << " GB/s, triad "
            << fmt(stream.triad_bytes_per_s / 1e9, 2) << " GB/s (best of 10; STREAM's byte counts)\n"
            << "model-shape GEMMs together (C " << embd << ", M " << tokens
            << "): " << fmt(model_flops / model_seconds / 1e9, 1) << " GFLOP/s\n";
  const ModelOpRates ops = measure_model_op_rates(tokens, embd, vocab);
  std::cout << "engine ops at the model's shapes (M " << tokens << ", C " << embd << ", V " << vocab
            << "): GEMMs forward + backward " << fmt(ops.gemm_training_flops_per_s / 1e9, 1)
            << " GFLOP/s (backward alone " << fmt(ops.gemm_backward_flops_per_s / 1e9, 1)
            << ");\n  2 layernorms + 2 adds " << fmt(1e3 * ops.memory_seconds, 3)
            << " ms fwd + bwd = " << fmt(ops.memory_bytes_per_s / 1e9, 2) << " GB/s; GELU (4C) "
            << fmt(1e3 * ops.activation_seconds, 3) << " ms fwd + bwd = " << fmt(ops.activation_bytes_per_s / 1e9, 2)
            << " GB/s (bytes as the planner counts them); AdamW + zeroing 4 Mi elements "
            << fmt(ops.optimizer_bytes_per_s / 1e9, 2) << " GB/s (32 B per element)\n";
  nlohmann::json by_tp = nlohmann::json::object();
  for (const auto& [tp, rate] : ops.gemm_training_flops_per_s_by_tp) {
    by_tp[std::to_string(tp)] = rate;
    std::cout << "  one rank's GEMMs of a tp " << tp << " split: " << fmt(rate / 1e9, 1) << " GFLOP/s ("
              << fmt(rate / ops.gemm_training_flops_per_s, 2) << " x whole)\n";
  }
  if (!profile.empty()) {
    merge_machine_profile(
        profile, "bench_gemm",
        {{"peak_flops_per_s", measured.flops_per_second},
         {"peak_source", "measured register FMA peak (" + train::describe_vector_isa(measured.isa) + ", " +
                             std::to_string(measured.threads) + " threads)"},
         {"precision", "fp32"},
         {"threads", omp_get_max_threads()},
         {"compute.matmul_flops_per_s", ops.gemm_training_flops_per_s},
         {"compute.matmul_forward_flops_per_s", model_flops / model_seconds},
         {"compute.matmul_shapes", "myriad matmul_forward + matmul_backward, (M, K) x (N, K)^T, M " +
                                       std::to_string(tokens) + " tokens, C " + std::to_string(embd) +
                                       ": K C -> N 3C, C, 4C, V " + std::to_string(vocab) +
                                       "; K 4C -> N C; 6MNK FLOPs summed / median times summed"},
         {"compute.gemm_sizes", gemm_sizes},
         {"compute.matmul_flops_per_s_by_tp", by_tp},
         {"compute.memory_bytes_per_s", ops.memory_bytes_per_s},
         {"compute.activation_bytes_per_s", ops.activation_bytes_per_s},
         {"compute.optimizer_bytes_per_s", ops.optimizer_bytes_per_s},
         {"compute.memory_source",
          "engine ops at M " + std::to_string(tokens) + ", C " + std::to_string(embd) +
              ", forward + backward, bytes as step_time.py counts them (f32; backward = 2 x forward): memory = "
              "layernorm x2 + residual add x2; activation = GELU (4C); optimizer = adamw_update + zeroing over "
              "4 Mi elements, 32 B each"},
         {"compute.stream",
          {{"copy_bytes_per_s", stream.copy_bytes_per_s},
           {"triad_bytes_per_s", stream.triad_bytes_per_s},
           {"array_bytes", stream.array_bytes}}}},
        argc, argv);
    std::cout << "profile: " << profile << " (bench_gemm's keys merged)\n";
  }
  return all_ok ? 0 : 1;
}

int main(int argc, char** argv) {
  return myriad::bench::run_reporting_errors("bench_gemm", [&] { return run(argc, argv); });
}
