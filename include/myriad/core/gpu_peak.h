// GPU dense peaks — the datasheet FLOP/s an MFU on a GPU divides by, keyed by the device's compute
// capability and SM count (what the CUDA runtime reports), per compute format: f32 is the CUDA-core
// FMA rate (myriad's f32 GEMMs do not use TF32), bf16 / f16 the dense tensor-core rate (no 2:4
// sparsity). Values are NVIDIA's published boost-clock figures; a device not in the table gives 0
// and a reason, and the run then needs logging.peak_tflops for its MFU. No clock scaling: a GPU
// held below its boost clock reads a lower MFU than its work deserves, never one above 100 %.
#pragma once

#include <string>

#include "myriad/core/dtype.h"

namespace myriad {

struct GpuIdentity {
  std::string name;  // "NVIDIA H200"
  int major = 0, minor = 0;
  int sms = 0;  // streaming multiprocessors
};

struct GpuPeak {
  double flops = 0.0;  // per GPU; 0 = not known
  std::string source;  // what the value is ("H100/H200 SXM (sm_90, 132 SMs) bf16 dense datasheet") or why none
};

GpuPeak gpu_dense_peak(const GpuIdentity& gpu, DType compute_format);

}  // namespace myriad
