// PeakFlops — the per-rank peak FLOP/s that MFU divides by, measured and from the datasheet, and
// the fp32 vector-width model both peaks share.
//
// measured: a short fp32 GEMM run at start-up (1024^3 through the same matmul op the model uses,
//   repeated for ~`seconds`, best repetition) with this rank's threads — what this rank can
//   actually reach, so MFU = 100 % means "as fast as a large GEMM".
// datasheet: `configured_tflops` when > 0 (a GPU's or CPU's published peak), otherwise an
//   estimate from the CPU: threads x clock (/proc/cpuinfo) x fp32 FLOPs per cycle per core of the
//   widest vector ISA the CPU offers at run time (fp32_flops_per_cycle: 2 x lanes x FMA units:
//   AVX-512 64, AVX2+FMA 32, AVX 16, SSE 8).
// register peak: measure_fma_peak_flops runs independent multiply-add chains held in registers
//   on every OpenMP thread with the same ISA, best round of short bursts — the roofline the
//   benchmarks compare GEMMs with.
//   Its widest kernels carry target attributes, so no build flag is needed to use them.
// The MFU denominator (mfu_peak, the `mfu` metric; docs/metrics.md): logging.peak_tflops when set,
//   else on a GPU (gpu_peak_flops) the device's dense datasheet peak for the compute format
//   (core/gpu_peak.h; the host GEMM says nothing about the GPU and is not measured), else on the
//   CPU the larger of the datasheet estimate and the start-up GEMM sample — a sample taken while
//   other work shares the cores can only be low, so it never lowers the peak (which would raise
//   the MFU past 100 %). On the CPU the measured sample also raises a configured peak below it.
//   `mfu_datasheet` stays the metric over the datasheet value alone.
// Assumption: 2 FMA units per core for FMA ISAs (Intel Haswell..Sapphire Rapids Gold/Platinum,
// AMD Zen 2..5 at 256 bits); 1-FMA-unit parts (some Xeon Silver/Bronze, Zen 4's AVX-512 halves)
// reach half of the estimate — the measured register peak shows it.
#pragma once

#include <string>

#include "myriad/core/gpu_peak.h"

namespace myriad::train {

struct PeakFlops {
  double measured = 0.0;         // FLOP/s of the start-up host GEMM, 0 when not measured
  double datasheet = 0.0;        // FLOP/s; 0 when not known (a GPU missing from the table)
  std::string datasheet_source;  // "logging.peak_tflops", the GPU table's row, or the CPU estimate's formula
  double mfu_peak = 0.0;         // FLOP/s the MFU divides by (see the file comment); 0 = no MFU
  std::string mfu_source;        // which of the above it is, and why
};

// The CPU's: `measure` runs the start-up GEMM sample.
PeakFlops find_peak_flops(bool measure, double configured_tflops, double seconds = 0.3);
// A GPU's, for the compute format its GEMMs run in (f32, or bf16 / f16 operands).
PeakFlops gpu_peak_flops(const GpuIdentity& gpu, DType compute_format, double configured_tflops);

// fp32 vector instruction sets, narrowest first. sse and avx have no FMA (a multiply and an add
// issue to separate units); avx2_fma and avx512 fuse them.
enum class VectorIsa { sse, avx, avx2_fma, avx512 };

int fp32_lanes(VectorIsa isa);               // 4, 8, 8, 16
bool has_fma(VectorIsa isa);                 // avx2_fma, avx512
int fma_units_per_core(VectorIsa isa);       // 2 with FMA; 1 multiply + add pair without
double fp32_flops_per_cycle(VectorIsa isa);  // 2 x lanes x units: 8, 16, 32, 64
const char* vector_isa_name(VectorIsa isa);  // "SSE", "AVX", "AVX2+FMA", "AVX-512"
// "AVX-512 (16 fp32 lanes)"
std::string describe_vector_isa(VectorIsa isa);

// The widest ISA this CPU supports at run time (__builtin_cpu_supports).
VectorIsa widest_vector_isa();

struct RegisterPeak {
  double flops_per_second = 0.0;  // over all threads
  VectorIsa isa = VectorIsa::sse;
  int threads = 0;
  int chains = 0;  // independent vector accumulators per thread
};

// fp32 register peak: every OpenMP thread runs `chains` independent multiply-add chains of `isa`
// vectors, in rounds of ~1 ms bursts started together, for about `seconds`; the best round's
// FLOPs over all threads / its slowest thread's time (a shared machine's neighbours miss some
// rounds). `isa` must be supported by the CPU (MYRIAD_CHECK).
RegisterPeak measure_fma_peak_flops(VectorIsa isa, double seconds);

}  // namespace myriad::train
