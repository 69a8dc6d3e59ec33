// The GPU dense-peak table (core/gpu_peak.h).
#include "myriad/core/gpu_peak.h"

#include <array>
#include <sstream>

namespace myriad {

namespace {

struct GpuPeakRow {
  int major, minor, sms;
  const char* name_hint;  // a substring of the device name that tells variants of one SM count apart; "" = any
  const char* family;
  double f32_tflops, tensor16_tflops;  // CUDA-core fp32 FMA; bf16 / f16 dense tensor core
};

// NVIDIA datasheets (boost clock, dense).
constexpr std::array<GpuPeakRow, 7> kGpuPeaks = {{
    {9, 0, 132, "NVL", "H100 NVL", 60.0, 835.5},
    {9, 0, 132, "", "H100/H200 SXM", 66.9, 989.4},
    {9, 0, 114, "", "H100 PCIe", 51.2, 756.5},
    {8, 0, 108, "", "A100", 19.5, 312.0},
    {8, 9, 142, "", "L40S", 91.6, 362.1},
    {8, 9, 58, "", "L4", 30.3, 121.0},
    {8, 6, 72, "", "A10", 31.2, 125.0},
}};

}  // namespace

GpuPeak gpu_dense_peak(const GpuIdentity& gpu, DType compute_format) {
  const bool tensor = compute_format == DType::bf16 || compute_format == DType::f16;
  std::ostringstream where;
  where << gpu.name << " (sm_" << gpu.major << gpu.minor << ", " << gpu.sms << " SMs)";
  for (const GpuPeakRow& row : kGpuPeaks) {
    if (row.major != gpu.major || row.minor != gpu.minor || row.sms != gpu.sms) continue;
    if (*row.name_hint != '\0' && gpu.name.find(row.name_hint) == std::string::npos) continue;
    std::ostringstream source;
    source << row.family << " datasheet, " << (tensor ? dtype_name(compute_format) : "fp32") << " dense"
           << (tensor ? " tensor core" : " CUDA core") << ", for " << where.str();
    return {(tensor ? row.tensor16_tflops : row.f32_tflops) * 1e12, source.str()};
  }
  return {0.0, where.str() +
                   " is not in myriad's table of GPU peaks (core/gpu_peak.cpp): set logging.peak_tflops "
                   "to its dense peak for the MFU"};
}

}  // namespace myriad
