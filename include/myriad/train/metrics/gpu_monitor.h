// GpuMonitor — the GPU fields of the step metrics (the cluster-training recipe's monitoring line:
// GPU Util, Memory BW, Pcie BW; plus power and SM clock): a background thread reads a GpuSampler
// every `interval` and take() returns the mean of the readings since the previous take(), so a
// step's values cover that step. Fields a device does not report stay -1 (left out of the line).
//
// Invariants: one sampling thread, stopped and joined by the destructor (a condition variable, so
// stopping never waits out an interval); take() and the thread share the pending readings under a
// mutex, and every read of the sampler holds read_mutex_ (one reader at a time). The sampler is an
// interface (an emulated one in CI, NVML on a GPU); take() with no reading since the last one
// reads the sampler once itself, so a step shorter than the interval still has its values.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "myriad/core/gpu_sampler.h"
#include "myriad/train/metrics/step_metrics.h"

namespace myriad::train {

// Mean of the fields of `readings` that were reported (>= 0) in each.
GpuStepMetrics average_readings(const GpuReading* readings, int count);

class GpuMonitor {
 public:
  GpuMonitor(std::unique_ptr<GpuSampler> sampler, std::chrono::milliseconds interval);
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  GpuStepMetrics take();
  std::string describe() const { return sampler_->describe(); }

 private:
  void run();
  GpuReading read_sampler();

  std::unique_ptr<GpuSampler> sampler_;
  std::chrono::milliseconds interval_;
  std::mutex read_mutex_;  // held around every sampler_->read()
  std::mutex mutex_;       // pending_, stop_
  std::condition_variable wake_;
  bool stop_ = false;
  std::vector<GpuReading> pending_;  // readings since the last take()
  std::thread thread_;               // last: starts after everything it reads
};

}  // namespace myriad::train
