// cuBLASLt GEMM for linear layers: y = x @ W^T (+ bias) (then GELU), row-major like the CPU ops.
//
//   x (M, K), W (N, K) [out features, in features], bias (N) or null, y (M, N); all row-major
//   contiguous device memory of the context's device. Inputs in f32, bf16 or f16 (x, W and y of
//   one type; bias of y's type); accumulation always in f32 (CUBLAS_COMPUTE_32F: no TF32 for f32
//   inputs, so f32 results match a CPU f32 GEMM up to summation order). Epilogues fuse the bias
//   add and the tanh-GELU of GPT-2 into the GEMM. `accumulate` adds into y (beta = 1) instead of
//   overwriting it (no epilogue allowed then).
// Row-major y = x W^T is computed as the column-major y^T = W x^T: A = W (transposed), B = x.
// The algorithm is cuBLASLt's first heuristic choice for the shape with the context's
// workspace; shape and type errors throw myriad::Error naming the argument before any GPU work.
#pragma once

#include <cuda_runtime_api.h>
#include <library_types.h>

#include <cstdint>

#include "myriad/cuda/device_context.h"

namespace myriad::cuda {

enum class GemmEpilogue { none, bias, bias_gelu };

struct LinearGemm {
  std::int64_t m = 0, n = 0, k = 0;
  cudaDataType_t type = CUDA_R_32F;  // CUDA_R_32F, CUDA_R_16BF or CUDA_R_16F
  GemmEpilogue epilogue = GemmEpilogue::none;
  bool accumulate = false;
};

void linear_gemm(const DeviceContext& context, const LinearGemm& shape, const void* x, const void* weight,
                 const void* bias, void* y);

}  // namespace myriad::cuda
