// GpuMonitor: background sampling and per-step means of the GPU's readings (gpu_monitor.h).
#include "myriad/train/metrics/gpu_monitor.h"

namespace myriad::train {

GpuStepMetrics average_readings(const GpuReading* readings, int count) {
  // PCIe: the mean of each reading's share (a reading missing a term is left out).
  double pcie = 0.0;
  int pcie_reported = 0;
  for (int i = 0; i < count; ++i) {
    if (const double share = pcie_share(readings[i]); share >= 0) {
      pcie += share;
      ++pcie_reported;
    }
  }
  const GpuReading mean = mean_reading(readings, count);
  return {.readings = count,
          .sm_utilization = mean.sm_utilization,
          .memory_utilization = mean.memory_utilization,
          .pcie_utilization = pcie_reported > 0 ? pcie / pcie_reported : -1.0,
          .power_watts = mean.power_watts,
          .sm_clock_mhz = mean.sm_clock_mhz};
}

GpuMonitor::GpuMonitor(std::unique_ptr<GpuSampler> sampler, std::chrono::milliseconds interval)
    : sampler_(std::move(sampler)), interval_(interval), thread_([this] { run(); }) {}

GpuMonitor::~GpuMonitor() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

GpuReading GpuMonitor::read_sampler() {
  std::lock_guard<std::mutex> lock(read_mutex_);
  return sampler_->read();
}

void GpuMonitor::run() {
  std::unique_lock<std::mutex> lock(mutex_);
  while (!stop_) {
    lock.unlock();
    const GpuReading reading = read_sampler();  // outside mutex_: an NVML call may take a while
    lock.lock();
    pending_.push_back(reading);
    wake_.wait_for(lock, interval_, [this] { return stop_; });
  }
}

GpuStepMetrics GpuMonitor::take() {
  std::vector<GpuReading> readings;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    readings.swap(pending_);
  }
  if (readings.empty()) readings.push_back(read_sampler());  // a step shorter than the interval
  return average_readings(readings.data(), static_cast<int>(readings.size()));
}

}  // namespace myriad::train
