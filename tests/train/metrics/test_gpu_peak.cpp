// The GPU dense-peak table and the MFU peak chosen from it or from the CPU: the H200 / H100 SXM row
// (989.4 TFLOP/s bf16, 66.9 fp32), a name that tells two variants of one SM count apart (H100 NVL),
// a device missing from the table (0 and a reason naming logging.peak_tflops); on the CPU the MFU
// peak is the larger of the datasheet estimate and the start-up GEMM, so a configured peak below
// what the GEMM reached cannot lift the MFU past 100 %.
#include <gtest/gtest.h>

#include "myriad/core/gpu_peak.h"
#include "myriad/train/metrics/peak_flops.h"

namespace myriad {
namespace {

TEST(GpuPeak, TheH200ReadsTheHopperSxmDatasheetPerComputeFormat) {
  const GpuIdentity h200{"NVIDIA H200", 9, 0, 132};
  EXPECT_DOUBLE_EQ(gpu_dense_peak(h200, DType::bf16).flops, 989.4e12);
  EXPECT_DOUBLE_EQ(gpu_dense_peak(h200, DType::f16).flops, 989.4e12);
  EXPECT_DOUBLE_EQ(gpu_dense_peak(h200, DType::f32).flops, 66.9e12);
  EXPECT_NE(gpu_dense_peak(h200, DType::bf16).source.find("H100/H200 SXM"), std::string::npos);
  EXPECT_DOUBLE_EQ(gpu_dense_peak({"NVIDIA H100 NVL", 9, 0, 132}, DType::bf16).flops, 835.5e12);
  EXPECT_DOUBLE_EQ(gpu_dense_peak({"NVIDIA A100-SXM4-80GB", 8, 0, 108}, DType::bf16).flops, 312e12);
}

TEST(GpuPeak, ADeviceMissingFromTheTableHasNoPeakAndSaysWhatToSet) {
  const GpuPeak unknown = gpu_dense_peak({"Emulated GPU", 12, 0, 7}, DType::bf16);
  EXPECT_EQ(unknown.flops, 0.0);
  EXPECT_NE(unknown.source.find("logging.peak_tflops"), std::string::npos) << unknown.source;
  EXPECT_NE(unknown.source.find("sm_120"), std::string::npos) << unknown.source;
}

TEST(GpuPeak, OnAGpuTheMfuPeakIsTheDatasheetOrTheConfiguredValueNeverTheHostGemm) {
  const train::PeakFlops table = train::gpu_peak_flops({"NVIDIA H200", 9, 0, 132}, DType::bf16, 0.0);
  EXPECT_DOUBLE_EQ(table.mfu_peak, 989.4e12);
  EXPECT_EQ(table.measured, 0.0);
  const train::PeakFlops configured = train::gpu_peak_flops({"NVIDIA H200", 9, 0, 132}, DType::bf16, 500.0);
  EXPECT_DOUBLE_EQ(configured.mfu_peak, 500e12);
  EXPECT_EQ(configured.mfu_source, "logging.peak_tflops");
}

TEST(GpuPeak, OnTheCpuAPeakBelowTheMeasuredGemmIsRaisedToIt) {
  // 1 MFLOP/s configured: far below any GEMM; the measured sample becomes the MFU peak.
  const train::PeakFlops low = train::find_peak_flops(true, 1e-6, 0.05);
  ASSERT_GT(low.measured, 1e6);
  EXPECT_DOUBLE_EQ(low.mfu_peak, low.measured);
  EXPECT_NE(low.mfu_source.find("GEMM"), std::string::npos) << low.mfu_source;
  // Not measured: the configured value as given.
  const train::PeakFlops unmeasured = train::find_peak_flops(false, 2.0);
  EXPECT_DOUBLE_EQ(unmeasured.mfu_peak, 2e12);
  // The estimate alone: never below the datasheet formula.
  const train::PeakFlops estimate = train::find_peak_flops(true, 0.0, 0.05);
  EXPECT_GE(estimate.mfu_peak, estimate.datasheet);
  EXPECT_GE(estimate.mfu_peak, estimate.measured);
}

}  // namespace
}  // namespace myriad
