// bench_gpu_metrics — the GPU fields of the step metrics, read from the real driver: NVML (through
// core/gpu_sampler.h, as training reads it) sampled every 100 ms for 1.5 s in three phases — idle,
// device-to-device copies (HBM traffic: Memory BW should rise), host-to-device copies from pinned
// memory (PCIe traffic: Pcie BW should rise) — and printed as one table with the phase's achieved
// copy bandwidth beside the readings. scripts/gpu_check.sh runs it; without a GPU or without the
// driver's NVML it prints why and exits 0.
#include <cuda_runtime_api.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "myriad/core/gpu_sampler.h"

namespace {

struct PhaseResult {
  myriad::GpuReading mean;
  double copy_bytes_per_s = 0.0;
};

// Runs `copy` (returning the bytes it moved) in a loop on a worker thread while the sampler reads
// every 100 ms for `seconds`; null `copy` = idle.
PhaseResult run_phase(myriad::GpuSampler& sampler, const std::function<std::size_t()>& copy, double seconds) {
  std::atomic<bool> stop{false};
  std::atomic<std::size_t> moved{0};
  const auto start = std::chrono::steady_clock::now();
  std::thread worker([&] {
    while (copy && !stop.load()) moved += copy();
  });
  std::vector<myriad::GpuReading> readings;
  while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() < seconds) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    readings.push_back(sampler.read());
  }
  stop = true;
  worker.join();
  const double elapsed = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return {myriad::mean_reading(readings.data(), static_cast<int>(readings.size())),
          static_cast<double>(moved.load()) / elapsed};
}

std::string percent(double share) {
  if (share < 0) return "n/a";
  char text[16];
  std::snprintf(text, sizeof text, "%.0f%%", 100.0 * share);
  return text;
}

}  // namespace

int main() {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("bench_gpu_metrics: no CUDA device\n");
    return 0;
  }
  std::array<char, 32> bus{};
  cudaDeviceGetPCIBusId(bus.data(), static_cast<int>(bus.size()), 0);
  std::string why;
  std::unique_ptr<myriad::GpuSampler> sampler = myriad::open_nvml_sampler(bus.data(), &why);
  if (!sampler) {
    std::printf("bench_gpu_metrics: no GPU metrics: %s\n", why.c_str());
    return 0;
  }
  constexpr std::size_t kDeviceBytes = std::size_t{1} << 30, kHostBytes = std::size_t{256} << 20;
  void *a = nullptr, *b = nullptr, *host = nullptr;
  if (cudaMalloc(&a, kDeviceBytes) != cudaSuccess || cudaMalloc(&b, kDeviceBytes) != cudaSuccess ||
      cudaMallocHost(&host, kHostBytes) != cudaSuccess) {
    std::printf("bench_gpu_metrics: allocation failed\n");
    return 1;
  }
  cudaMemset(a, 1, kDeviceBytes);
  cudaDeviceSynchronize();
  std::printf("bench_gpu_metrics on %s: NVML sampled every 100 ms for 1.5 s per phase\n", sampler->describe().c_str());
  std::printf("| phase | copies (GB/s) | GPU Util | Memory BW | Pcie BW | power (W) | SM clock (MHz) |\n");
  std::printf("|---|---|---|---|---|---|---|\n");
  const std::vector<std::pair<const char*, std::function<std::size_t()>>> phases = {
      {"idle", nullptr},
      {"device-to-device copies (HBM)",
       [&] {
         cudaMemcpy(b, a, kDeviceBytes, cudaMemcpyDeviceToDevice);
         return 2 * kDeviceBytes;  // read + write
       }},
      {"host-to-device copies (PCIe)",
       [&] {
         cudaMemcpy(a, host, kHostBytes, cudaMemcpyHostToDevice);
         return kHostBytes;
       }},
  };
  for (const auto& [name, copy] : phases) {
    const PhaseResult r = run_phase(*sampler, copy, 1.5);
    std::printf("| %s | %.0f | %s | %s | %s | %.0f | %.0f |\n", name, r.copy_bytes_per_s / 1e9,
                percent(r.mean.sm_utilization).c_str(), percent(r.mean.memory_utilization).c_str(),
                percent(myriad::pcie_share(r.mean)).c_str(), r.mean.power_watts, r.mean.sm_clock_mhz);
  }
  std::printf("Pcie BW = (TX + RX) / (2 x one direction at the current link generation and width)\n");
  cudaFree(a);
  cudaFree(b);
  cudaFreeHost(host);
  return 0;
}
