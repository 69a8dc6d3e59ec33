// bench_gemm: myriad's matmul against calling OpenBLAS sgemm directly on the same buffers, and
// against the machine's fp32 peak measured in the same run: register FMA chains on vectors of the
// widest ISA the CPU offers (AVX-512 when present; the ISA and the OpenBLAS kernel are printed in
// the header), so 'myriad / peak' stays <= 100% whichever kernel OpenBLAS picks.
//
// Sweeps square sizes 256..4096 and the GEMMs of a GPT-2 small layer with M = B*T tokens,
// K = 768 and N = 768 (attention projection), 2304 (QKV), 3072 (MLP up) and 50304 (LM head),
// in the layout the model uses (activations (B, T, K) times a weight stored (N, K), transposed).
// Before timing, each case checks that both paths produce the same numbers.
// Usage: OMP_NUM_THREADS=2 bench_gemm [--quick] [--tokens M]
#include <cblas.h>

#include <cmath>
#include <cstring>
#include <iostream>

#include "harness.h"
#include "myriad/core/philox.h"
#include "myriad/ops/matmul.h"
#include "myriad/train/peak_flops.h"

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

int main(int argc, char** argv) {
  bool quick = false;
  std::int64_t tokens = 2048;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0)
      quick = true;
    else if (std::strcmp(argv[i], "--tokens") == 0 && i + 1 < argc)
      tokens = std::atoll(argv[++i]);
    else {
      std::cerr << "usage: bench_gemm [--quick] [--tokens M]\n";
      return 2;
    }
  }
  print_header("bench_gemm: myriad matmul vs direct OpenBLAS sgemm (fp32)", argc, argv);
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
  cases.reserve(squares.size() + 4);  // the squares, then the 4 transformer shapes below
  for (std::int64_t s : squares) cases.push_back({"square " + std::to_string(s), {s, s}, s, false});
  std::int64_t batch = 4, seq = tokens / 4;
  for (std::int64_t n : {768, 2304, 3072, 50304}) {
    if (quick && n == 50304) continue;
    cases.push_back({"B*T=" + std::to_string(tokens) + " K=768 N=" + std::to_string(n), {batch, seq, 768}, n, true});
  }

  Table table({"case", "M", "N", "K", "direct GFLOP/s", "myriad GFLOP/s", "myriad / direct", "myriad / peak"});
  bool all_ok = true;
  for (const GemmCase& c : cases) {
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
  }
  table.print();
  std::cout << "\nGFLOP/s = 2*M*N*K / time; time = median over >= 10 paired repeats (direct and myriad alternating "
               "call by call).\n";
  return all_ok ? 0 : 1;
}
