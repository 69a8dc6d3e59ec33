// DeviceContext — what one rank needs to run work on one GPU: the device index, a stream of its
// own (non-blocking with respect to the legacy default stream), a cuBLASLt handle and the
// workspace buffer cuBLASLt may use for its faster algorithms, a cuBLAS handle bound to the
// stream (for the grouped GEMM of cublasGemmGroupedBatchedEx, CUDA >= 12.5), the caching
// allocator device tensors draw memory from (allocator(): stream-aware, statistics in stats()),
// and the cuBLASLt plans gemm() made so far (descriptors and the chosen algorithm per GEMM
// shape, gemm.h).
//
// RAII and not global: whoever drives a device owns one context and passes it by reference.
// Not copyable or movable (handles are bound to the object's lifetime). Construction leaves the
// caller's current device unchanged and throws myriad::Error on a bad index or a CUDA failure;
// destruction waits for the stream, releases everything and never throws.
#pragma once

#include <cublasLt.h>
#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <memory>
#include <type_traits>

#include "myriad/core/caching_allocator.h"
#include "myriad/cuda/device_allocator.h"
#include "myriad/cuda/device_buffer.h"

namespace myriad::cuda {

// Number of visible CUDA devices; 0 when there is no driver, no device, or any other error
// (never throws). Tests use it to skip; production code checks the index it is given.
int cuda_device_count_or_zero() noexcept;

class GemmPlans;  // src/cuda/gemm.cpp

class DeviceContext {
 public:
  // 32 MiB: the cuBLAS(Lt) recommendation for Hopper; smaller GPUs need less, never more.
  static constexpr std::size_t kDefaultWorkspaceBytes = std::size_t{32} << 20;

  explicit DeviceContext(int device, std::size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device() const { return device_; }
  cudaStream_t stream() const { return stream_.get(); }
  cublasLtHandle_t cublaslt() const { return cublaslt_.get(); }
  // cuBLAS handle whose work goes to stream() (pointer mode host, cuBLAS's own workspace).
  cublasHandle_t cublas() const { return cublas_.get(); }
  void* workspace() const { return workspace_.data(); }
  std::size_t workspace_bytes() const { return workspace_.bytes(); }
  CachingAllocator& allocator() { return *allocator_; }

  // Blocks until all work queued on stream() is done; throws myriad::Error on a device fault.
  void synchronize() const;

  // gemm()'s plan cache, made on first use (a context is driven by one thread at a time).
  GemmPlans& gemm_plans() const;

 private:
  struct StreamDeleter {
    void operator()(std::remove_pointer_t<cudaStream_t>* stream) const noexcept;
  };
  struct CublasLtDeleter {
    void operator()(std::remove_pointer_t<cublasLtHandle_t>* handle) const noexcept;
  };
  struct CublasDeleter {
    void operator()(std::remove_pointer_t<cublasHandle_t>* handle) const noexcept;
  };
  struct GemmPlansDeleter {
    void operator()(GemmPlans* plans) const noexcept;  // gemm.cpp
  };

  int device_;
  std::unique_ptr<std::remove_pointer_t<cudaStream_t>, StreamDeleter> stream_;
  std::unique_ptr<std::remove_pointer_t<cublasLtHandle_t>, CublasLtDeleter> cublaslt_;
  std::unique_ptr<std::remove_pointer_t<cublasHandle_t>, CublasDeleter> cublas_;
  DeviceBuffer workspace_;
  DeviceRawAllocator raw_allocator_;
  std::unique_ptr<CachingAllocator> allocator_;  // destroyed first: returns its segments while raw_ lives
  mutable std::unique_ptr<GemmPlans, GemmPlansDeleter> gemm_plans_;  // before the handle goes
};

}  // namespace myriad::cuda
