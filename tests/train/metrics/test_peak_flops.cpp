// PeakFlops: the vector-width model (lanes, FMA units, FLOPs per cycle per ISA), run-time ISA
// detection against the CPU's own flags, the register FMA peak running at the widest width, and
// the datasheet estimate naming the same ISA. (Rates — the peak against narrower kernels and
// against GEMM — are compared by bench_gemm, whose table is in docs/performance.md.)
#include <gtest/gtest.h>
#include <omp.h>

#include <string>

#include "myriad/train/metrics/peak_flops.h"

namespace myriad::train {
namespace {

TEST(PeakFlops, FlopsPerCycleIsTwiceLanesTimesUnits) {
  EXPECT_EQ(fp32_lanes(VectorIsa::sse), 4);
  EXPECT_EQ(fp32_lanes(VectorIsa::avx), 8);
  EXPECT_EQ(fp32_lanes(VectorIsa::avx2_fma), 8);
  EXPECT_EQ(fp32_lanes(VectorIsa::avx512), 16);
  EXPECT_FALSE(has_fma(VectorIsa::sse));
  EXPECT_FALSE(has_fma(VectorIsa::avx));
  EXPECT_TRUE(has_fma(VectorIsa::avx2_fma));
  EXPECT_TRUE(has_fma(VectorIsa::avx512));
  EXPECT_DOUBLE_EQ(fp32_flops_per_cycle(VectorIsa::sse), 8.0);        // 4-wide mul + 4-wide add
  EXPECT_DOUBLE_EQ(fp32_flops_per_cycle(VectorIsa::avx), 16.0);       // 8-wide mul + 8-wide add
  EXPECT_DOUBLE_EQ(fp32_flops_per_cycle(VectorIsa::avx2_fma), 32.0);  // 2 FMA units x 8 lanes x 2
  EXPECT_DOUBLE_EQ(fp32_flops_per_cycle(VectorIsa::avx512), 64.0);    // 2 FMA units x 16 lanes x 2
  EXPECT_EQ(describe_vector_isa(VectorIsa::avx512), "AVX-512 (16 fp32 lanes)");
  EXPECT_EQ(describe_vector_isa(VectorIsa::avx2_fma), "AVX2+FMA (8 fp32 lanes)");
}

TEST(PeakFlops, WidestIsaFollowsTheCpuFlags) {
  VectorIsa expected = VectorIsa::sse;
  if (__builtin_cpu_supports("avx")) expected = VectorIsa::avx;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) expected = VectorIsa::avx2_fma;
  if (__builtin_cpu_supports("avx512f")) expected = VectorIsa::avx512;
  EXPECT_EQ(widest_vector_isa(), expected);
}

// Which kernel the peak runs (rates are compared in bench_gemm, not in tests: no timed tests).
TEST(PeakFlops, RegisterPeakRunsTheWidestVectorsWithEnoughChains) {
  const VectorIsa widest = widest_vector_isa();
  const RegisterPeak wide = measure_fma_peak_flops(widest, 0.01);
  EXPECT_EQ(wide.isa, widest);
  EXPECT_EQ(wide.threads, omp_get_max_threads());
  EXPECT_GE(wide.chains, 8);  // 2 FMA units x 4 cycles of latency
  EXPECT_GT(wide.flops_per_second, 0.0);
}

TEST(PeakFlops, DatasheetEstimateUsesTheSameWidth) {
  const PeakFlops p = find_peak_flops(false, 0.0);
  EXPECT_EQ(p.measured, 0.0);
  const VectorIsa isa = widest_vector_isa();
  const std::string per_cycle = std::to_string(static_cast<int>(fp32_flops_per_cycle(isa))) + " fp32 FLOP/cycle";
  EXPECT_NE(p.datasheet_source.find(per_cycle), std::string::npos) << p.datasheet_source;
  EXPECT_NE(p.datasheet_source.find(vector_isa_name(isa)), std::string::npos) << p.datasheet_source;
  const PeakFlops configured = find_peak_flops(false, 2.5);
  EXPECT_DOUBLE_EQ(configured.datasheet, 2.5e12);
  EXPECT_EQ(configured.datasheet_source, "logging.peak_tflops");
}

}  // namespace
}  // namespace myriad::train
