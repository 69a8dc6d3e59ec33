// Status checks for the CUDA runtime, cuBLAS / cuBLASLt and NCCL that throw myriad::Error.
//
// Each macro evaluates its expression once and, on failure, throws myriad::Error (rank, file and
// line come from MYRIAD_THROW at the call site) whose message names the library, the status name,
// its description and the failing expression:
//
//   MYRIAD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, stream));
//   MYRIAD_CUDA_CHECK(cudaGetLastError());   // after a kernel launch
//   MYRIAD_CUBLAS_CHECK(cublasLtMatmul(...));
//   MYRIAD_NCCL_CHECK(ncclAllReduce(...));
//
// A failed runtime call also clears the thread's last-error slot, so a later launch check does
// not report it a second time (sticky errors stay, as CUDA keeps them). MYRIAD_NCCL_CHECK treats
// every result but ncclSuccess as an error; a non-blocking communicator that polls for
// ncclInProgress handles that result itself. It needs no <nccl.h> here: the status text comes
// from myriad_cuda, which names the raw code when built without NCCL.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "myriad/core/error.h"

namespace myriad::cuda::detail {
// ncclGetErrorString for an ncclResult_t passed as int.
const char* nccl_status_string(int status);
}  // namespace myriad::cuda::detail

#define MYRIAD_CUDA_CHECK(expr)                                                                  \
  do {                                                                                           \
    const cudaError_t myriad_cuda_status_ = (expr);                                              \
    if (myriad_cuda_status_ != cudaSuccess) [[unlikely]] {                                       \
      (void)cudaGetLastError();                                                                  \
      MYRIAD_THROW("CUDA error " << cudaGetErrorName(myriad_cuda_status_) << " ("                \
                                 << cudaGetErrorString(myriad_cuda_status_) << ") from " #expr); \
    }                                                                                            \
  } while (0)

#define MYRIAD_CUBLAS_CHECK(expr)                                                                       \
  do {                                                                                                  \
    const cublasStatus_t myriad_cublas_status_ = (expr);                                                \
    if (myriad_cublas_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]] {                                  \
      MYRIAD_THROW("cuBLAS error " << cublasGetStatusName(myriad_cublas_status_) << " ("                \
                                   << cublasGetStatusString(myriad_cublas_status_) << ") from " #expr); \
    }                                                                                                   \
  } while (0)

#define MYRIAD_NCCL_CHECK(expr)                                                                     \
  do {                                                                                              \
    const int myriad_nccl_status_ = static_cast<int>(expr);                                         \
    if (myriad_nccl_status_ != 0) [[unlikely]] {                                                    \
      MYRIAD_THROW("NCCL error " << myriad_nccl_status_ << " ("                                     \
                                 << ::myriad::cuda::detail::nccl_status_string(myriad_nccl_status_) \
                                 << ") from " #expr);                                               \
    }                                                                                               \
  } while (0)
