// The dynamic shared memory a kernel asks for, checked against what the current device lets one
// block opt into (cudaDevAttrMaxSharedMemoryPerBlockOptin: about 227 KB on sm_90 and 163 KB on
// sm_80, but 99 KB on sm_86 / sm_89), so that a kernel too large for the GPU it runs on is refused
// naming the launcher, the bytes and the device instead of failing at launch. Host code (queries
// the device once per call; launchers call it before cudaFuncSetAttribute).
#pragma once

#include <cuda_runtime.h>

#include "myriad/core/error.h"
#include "myriad/cuda/check.h"

namespace myriad::cuda::detail {

inline void check_shared_memory(const char* op, int bytes, const char* alternative) {
  int device = 0, limit = 0;
  MYRIAD_CUDA_CHECK(cudaGetDevice(&device));
  MYRIAD_CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  MYRIAD_CHECK(bytes <= limit, op << ": needs " << bytes << " bytes of shared memory per block, but cuda:" << device
                                  << " lets a block use at most " << limit << "; " << alternative);
}

}  // namespace myriad::cuda::detail
