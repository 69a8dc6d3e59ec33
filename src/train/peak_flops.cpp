// Peak FLOP/s: a timed GEMM and a clock x width estimate of the CPU.
#include "myriad/train/peak_flops.h"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>

#include "myriad/core/philox.h"
#include "myriad/ops/matmul.h"

namespace myriad::train {

namespace {

double measured_gemm_flops(double seconds) {
  const std::int64_t n = 1024;
  Tensor a = Tensor::empty({n, n}), b = Tensor::empty({n, n}), c = Tensor::empty({n, n});
  fill_uniform(a, -1, 1, 11, 0);
  fill_uniform(b, -1, 1, 11, 1);
  double best = 0.0;
  const auto start = std::chrono::steady_clock::now();
  for (int rep = 0; rep < 50; ++rep) {
    const auto t0 = std::chrono::steady_clock::now();
    matmul_forward(MatmulArgs{}, a, b, c);
    const double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 2.0 * n * n * n / t);
    if (rep >= 2 && std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > seconds) break;
  }
  return best;
}

double cpu_mhz() {
  std::ifstream info("/proc/cpuinfo");
  for (std::string line; std::getline(info, line);) {
    if (line.rfind("cpu MHz", 0) == 0) return std::stod(line.substr(line.find(':') + 1));
  }
  return 0.0;
}

}  // namespace

PeakFlops find_peak_flops(bool measure, double configured_tflops, double seconds) {
  PeakFlops p;
  if (measure) p.measured = measured_gemm_flops(seconds);
  if (configured_tflops > 0) {
    p.datasheet = configured_tflops * 1e12;
    p.datasheet_source = "logging.peak_tflops";
    return p;
  }
  const int width = __builtin_cpu_supports("avx512f") ? 64 : __builtin_cpu_supports("fma") ? 32 : 16;
  const int threads = omp_get_max_threads();
  const double mhz = cpu_mhz();
  p.datasheet = threads * mhz * 1e6 * width;
  std::ostringstream source;
  source << threads << " threads x " << mhz << " MHz x " << width << " fp32 FLOP/cycle";
  p.datasheet_source = source.str();
  return p;
}

}  // namespace myriad::train
