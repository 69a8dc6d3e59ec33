// Peak FLOP/s: a timed GEMM, a clock x width estimate of the CPU, and the register FMA peak, the
// last two with the widest vector ISA the CPU offers at run time (see peak_flops.h).
#include "myriad/train/metrics/peak_flops.h"

#include <immintrin.h>
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <fstream>
#include <sstream>
#include <vector>

#include "myriad/core/error.h"
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

// Register FMA chains. Each kernel loads `chains` vectors of state, runs `iterations` rounds of
// acc = acc * mul + add on all of them (independent chains hide the FMA latency: 2 units x 4
// cycles needs >= 8 in flight), and stores them back so nothing is dead code. The fixed point of
// the recurrence is add / (1 - mul) = 0.1: no overflow, no denormals.
constexpr float kMul = 0.999999f, kAdd = 1e-7f;
constexpr int kChainsAvx512 = 16;  // of 32 zmm registers
constexpr int kChainsNarrow = 12;  // of 16 xmm/ymm registers (2 hold mul and add)

__attribute__((target("avx512f"))) void chains_avx512(float* state, long iterations) {
  __m512 acc[kChainsAvx512];
  for (int i = 0; i < kChainsAvx512; ++i) acc[i] = _mm512_loadu_ps(state + 16 * i);
  const __m512 mul = _mm512_set1_ps(kMul), add = _mm512_set1_ps(kAdd);
  for (long it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (__m512& a : acc) a = _mm512_fmadd_ps(a, mul, add);
  }
  for (int i = 0; i < kChainsAvx512; ++i) _mm512_storeu_ps(state + 16 * i, acc[i]);
}

__attribute__((target("avx2,fma"))) void chains_avx2_fma(float* state, long iterations) {
  __m256 acc[kChainsNarrow];
  for (int i = 0; i < kChainsNarrow; ++i) acc[i] = _mm256_loadu_ps(state + 8 * i);
  const __m256 mul = _mm256_set1_ps(kMul), add = _mm256_set1_ps(kAdd);
  for (long it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (__m256& a : acc) a = _mm256_fmadd_ps(a, mul, add);
  }
  for (int i = 0; i < kChainsNarrow; ++i) _mm256_storeu_ps(state + 8 * i, acc[i]);
}

__attribute__((target("avx"))) void chains_avx(float* state, long iterations) {
  __m256 acc[kChainsNarrow];
  for (int i = 0; i < kChainsNarrow; ++i) acc[i] = _mm256_loadu_ps(state + 8 * i);
  const __m256 mul = _mm256_set1_ps(kMul), add = _mm256_set1_ps(kAdd);
  for (long it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (__m256& a : acc) a = _mm256_add_ps(_mm256_mul_ps(a, mul), add);
  }
  for (int i = 0; i < kChainsNarrow; ++i) _mm256_storeu_ps(state + 8 * i, acc[i]);
}

void chains_sse(float* state, long iterations) {  // SSE is part of x86-64: no attribute needed
  __m128 acc[kChainsNarrow];
  for (int i = 0; i < kChainsNarrow; ++i) acc[i] = _mm_loadu_ps(state + 4 * i);
  const __m128 mul = _mm_set1_ps(kMul), add = _mm_set1_ps(kAdd);
  for (long it = 0; it < iterations; ++it) {
#pragma GCC unroll 16
    for (__m128& a : acc) a = _mm_add_ps(_mm_mul_ps(a, mul), add);
  }
  for (int i = 0; i < kChainsNarrow; ++i) _mm_storeu_ps(state + 4 * i, acc[i]);
}

bool cpu_supports(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::avx512:
      return __builtin_cpu_supports("avx512f");
    case VectorIsa::avx2_fma:
      return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    case VectorIsa::avx:
      return __builtin_cpu_supports("avx");
    case VectorIsa::sse:
      return true;
  }
  return false;
}

}  // namespace

int fp32_lanes(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::sse:
      return 4;
    case VectorIsa::avx:
    case VectorIsa::avx2_fma:
      return 8;
    case VectorIsa::avx512:
      return 16;
  }
  return 1;
}

bool has_fma(VectorIsa isa) { return isa == VectorIsa::avx2_fma || isa == VectorIsa::avx512; }

int fma_units_per_core(VectorIsa isa) { return has_fma(isa) ? 2 : 1; }

double fp32_flops_per_cycle(VectorIsa isa) { return 2.0 * fp32_lanes(isa) * fma_units_per_core(isa); }

const char* vector_isa_name(VectorIsa isa) {
  switch (isa) {
    case VectorIsa::sse:
      return "SSE";
    case VectorIsa::avx:
      return "AVX";
    case VectorIsa::avx2_fma:
      return "AVX2+FMA";
    case VectorIsa::avx512:
      return "AVX-512";
  }
  return "?";
}

std::string describe_vector_isa(VectorIsa isa) {
  return std::string(vector_isa_name(isa)) + " (" + std::to_string(fp32_lanes(isa)) + " fp32 lanes)";
}

VectorIsa widest_vector_isa() {
  for (VectorIsa isa : {VectorIsa::avx512, VectorIsa::avx2_fma, VectorIsa::avx}) {
    if (cpu_supports(isa)) return isa;
  }
  return VectorIsa::sse;
}

RegisterPeak measure_fma_peak_flops(VectorIsa isa, double seconds) {
  MYRIAD_CHECK(cpu_supports(isa), "measure_fma_peak_flops: this CPU does not support " << vector_isa_name(isa));
  void (*kernel)(float*, long) = isa == VectorIsa::avx512     ? chains_avx512
                                 : isa == VectorIsa::avx2_fma ? chains_avx2_fma
                                 : isa == VectorIsa::avx      ? chains_avx
                                                              : chains_sse;
  RegisterPeak peak;
  peak.isa = isa;
  peak.chains = isa == VectorIsa::avx512 ? kChainsAvx512 : kChainsNarrow;
  // Rounds of ~1 ms bursts, all threads together between barriers; the peak is the best round's
  // FLOPs over its slowest thread. On a shared (virtualised) machine some rounds run
  // undisturbed, so the best round is the hardware's rate where a total over `seconds` would
  // count the neighbours' time slices; threads that share a core still share its FMA units.
  const long inner = 1 << 16;
  const double flops_per_burst = static_cast<double>(inner) * peak.chains * fp32_lanes(isa) * 2.0;
  const int threads = omp_get_max_threads();
  std::vector<double> burst_s(static_cast<std::size_t>(threads), 0.0);
  double best = 0.0, checksum = 0.0, spent = 0.0;
  bool done = false;
#pragma omp parallel num_threads(threads) reduction(+ : checksum)
  {
    float state[kChainsAvx512 * 16];
    for (int i = 0; i < kChainsAvx512 * 16; ++i) state[i] = 0.5f + 0.001f * static_cast<float>(i);
    const int me = omp_get_thread_num();
    while (!done) {
#pragma omp barrier
      const auto start = std::chrono::steady_clock::now();
      kernel(state, inner);
      burst_s[me] = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
#pragma omp barrier
#pragma omp single
      {
        const double slowest = *std::max_element(burst_s.begin(), burst_s.end());
        best = std::max(best, threads * flops_per_burst / slowest);
        spent += slowest;
        done = spent >= seconds;
      }  // implicit barrier: every thread sees `done`
    }
    for (float v : state) checksum += v;
  }
  MYRIAD_CHECK(checksum > 0 && checksum < 1e30, "measure_fma_peak_flops: the chains diverged (" << checksum << ")");
  peak.threads = threads;
  peak.flops_per_second = best;
  return peak;
}

PeakFlops find_peak_flops(bool measure, double configured_tflops, double seconds) {
  PeakFlops p;
  if (measure) p.measured = measured_gemm_flops(seconds);
  if (configured_tflops > 0) {
    p.datasheet = configured_tflops * 1e12;
    p.datasheet_source = "logging.peak_tflops";
  } else {
    const VectorIsa isa = widest_vector_isa();
    const double per_cycle = fp32_flops_per_cycle(isa);
    const int threads = omp_get_max_threads();
    const double mhz = cpu_mhz();
    p.datasheet = threads * mhz * 1e6 * per_cycle;
    std::ostringstream source;
    source << threads << " threads x " << mhz << " MHz x " << per_cycle << " fp32 FLOP/cycle (" << vector_isa_name(isa)
           << ": 2 x " << fp32_lanes(isa) << " lanes x " << fma_units_per_core(isa)
           << (has_fma(isa) ? " FMA units)" : " multiply+add pair)");
    p.datasheet_source = source.str();
  }
  // The larger: a contended start-up sample is low and never lowers the peak; a sample above the
  // estimate (a clock above /proc/cpuinfo's, or a configured peak set too low) raises it.
  if (p.measured > p.datasheet) {
    p.mfu_peak = p.measured;
    p.mfu_source = "the start-up 1024^3 GEMM (above " + p.datasheet_source + ")";
  } else {
    p.mfu_peak = p.datasheet;
    p.mfu_source = p.datasheet_source;
  }
  return p;
}

PeakFlops gpu_peak_flops(const GpuIdentity& gpu, DType compute_format, double configured_tflops) {
  PeakFlops p;
  if (configured_tflops > 0) {
    p.datasheet = configured_tflops * 1e12;
    p.datasheet_source = "logging.peak_tflops";
  } else {
    const GpuPeak table = gpu_dense_peak(gpu, compute_format);
    p.datasheet = table.flops;
    p.datasheet_source = table.source;
  }
  p.mfu_peak = p.datasheet;
  p.mfu_source = p.datasheet_source;
  return p;
}

}  // namespace myriad::train
