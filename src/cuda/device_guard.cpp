// DeviceGuard: cudaGetDevice / cudaSetDevice around a scope; restoring never throws. select_device:
// cudaSetDevice for the rest of the process.
#include "myriad/cuda/device_guard.h"

#include "myriad/cuda/check.h"

namespace myriad::cuda {

DeviceGuard::DeviceGuard(int device) {
  MYRIAD_CUDA_CHECK(cudaGetDevice(&previous_));
  if (previous_ != device) MYRIAD_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  int current = -1;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) (void)cudaSetDevice(previous_);
  (void)cudaGetLastError();
}

void select_device(int device) { MYRIAD_CUDA_CHECK(cudaSetDevice(device)); }

}  // namespace myriad::cuda
