// PeakFlops — the per-rank peak FLOP/s that MFU divides by, measured and from the datasheet.
//
// measured: a short fp32 GEMM run at start-up (1024^3 through the same matmul op the model uses,
//   repeated for ~`seconds`, best repetition) with this rank's threads — what this rank can
//   actually reach, so MFU = 100 % means "as fast as a large GEMM".
// datasheet: `configured_tflops` when > 0 (a GPU's or CPU's published peak), otherwise an
//   estimate from the CPU: threads x clock (/proc/cpuinfo) x fp32 FLOPs per cycle per core
//   (32 with AVX2 FMA, 64 with AVX-512, 16 otherwise).
// Both are reported; MFU over each is a metric (docs/metrics.md).
#pragma once

#include <string>

namespace myriad::train {

struct PeakFlops {
  double measured = 0.0;   // FLOP/s, 0 when not measured
  double datasheet = 0.0;  // FLOP/s
  std::string datasheet_source;  // "logging.peak_tflops" or the estimate's formula
};

PeakFlops find_peak_flops(bool measure, double configured_tflops, double seconds = 0.3);

}  // namespace myriad::train
