// DeviceContext: creates the stream, the cuBLASLt and cuBLAS handles and the workspace on its
// device (under a DeviceGuard, so the caller's current device is unchanged) and releases them in
// reverse order.
#include "myriad/cuda/device_context.h"

#include <cublas_v2.h>

#include "myriad/cuda/check.h"
#include "myriad/cuda/device_guard.h"

namespace myriad::cuda {

int cuda_device_count_or_zero() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

void DeviceContext::StreamDeleter::operator()(std::remove_pointer_t<cudaStream_t>* stream) const noexcept {
  (void)cudaStreamDestroy(stream);
}

void DeviceContext::CublasLtDeleter::operator()(std::remove_pointer_t<cublasLtHandle_t>* handle) const noexcept {
  (void)cublasLtDestroy(handle);
}

void DeviceContext::CublasDeleter::operator()(std::remove_pointer_t<cublasHandle_t>* handle) const noexcept {
  (void)cublasDestroy(handle);
}

DeviceContext::DeviceContext(int device, std::size_t workspace_bytes) : device_(device), raw_allocator_(device) {
  const int count = cuda_device_count_or_zero();
  MYRIAD_CHECK(device >= 0 && device < count,
               "DeviceContext: no CUDA device " << device << " (" << count << " visible)");
  DeviceGuard guard(device);
  cudaStream_t stream = nullptr;
  MYRIAD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  stream_.reset(stream);
  cublasLtHandle_t handle = nullptr;
  MYRIAD_CUBLAS_CHECK(cublasLtCreate(&handle));
  cublaslt_.reset(handle);
  cublasHandle_t blas = nullptr;
  MYRIAD_CUBLAS_CHECK(cublasCreate(&blas));
  cublas_.reset(blas);
  MYRIAD_CUBLAS_CHECK(cublasSetStream(blas, stream));
  workspace_ = DeviceBuffer(workspace_bytes, device);
  allocator_ = std::make_unique<CachingAllocator>(raw_allocator_);
}

DeviceContext::~DeviceContext() {
  int previous = -1;
  const bool known = cudaGetDevice(&previous) == cudaSuccess;
  (void)cudaSetDevice(device_);
  if (stream_) (void)cudaStreamSynchronize(stream_.get());  // the workspace may still be in use
  workspace_ = DeviceBuffer();
  allocator_.reset();  // cached segments back to cudaFree (the stream is idle)
  gemm_plans_.reset();
  cublas_.reset();
  cublaslt_.reset();
  stream_.reset();
  if (known) (void)cudaSetDevice(previous);
  (void)cudaGetLastError();
}

void DeviceContext::synchronize() const { MYRIAD_CUDA_CHECK(cudaStreamSynchronize(stream_.get())); }

}  // namespace myriad::cuda
