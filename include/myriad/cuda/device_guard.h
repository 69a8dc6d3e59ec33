// DeviceGuard — makes one GPU current for a scope and restores the previous one on exit.
//
// The CUDA runtime keeps a per-thread current device; everything that creates device objects
// (streams, handles, buffers) goes through a guard so that no caller's current device changes
// behind its back. Construction throws myriad::Error on a bad index; destruction never throws.
#pragma once

namespace myriad::cuda {

class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

}  // namespace myriad::cuda
