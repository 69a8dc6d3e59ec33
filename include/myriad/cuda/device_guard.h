// DeviceGuard — makes one GPU current for a scope and restores the previous one on exit.
//
// The CUDA runtime keeps a per-thread current device; everything that creates device objects
// (streams, handles, buffers) goes through a guard so that no caller's current device changes
// behind its back. Construction throws myriad::Error on a bad index; destruction never throws.
// Code that switches devices keeps its guards; a process picks its own GPU with select_device().
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

// Makes `device` the calling thread's current GPU for good: a training process owns one GPU (its
// local rank's) and selects it once at start-up, before it creates anything on a device, so that
// every launch — guarded or not — and every context lands on that GPU, not on device 0. Throws
// myriad::Error on a bad index.
void select_device(int device);

}  // namespace myriad::cuda
