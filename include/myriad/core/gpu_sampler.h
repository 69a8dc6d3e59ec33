// GpuSampler — instantaneous readings of one GPU from the driver's management library (NVML),
// loaded at run time: `dlopen("libnvidia-ml.so.1")`, so CPU builds and machines without a driver
// link and run unchanged (open_nvml_sampler then returns null and says why).
//
// A GpuReading is what NVML reports at one moment: utilisation of the SMs (the share of the last
// sample period in which a kernel ran) and of device memory (the share in which memory was read or
// written: the memory-bandwidth utilisation), PCIe TX and RX throughput (a 20 ms byte counter, KB/s
// in NVML) against the current link's maximum (generation x width), board power and the SM clock
// against its maximum. Any field the device does not report reads -1.
#pragma once

#include <memory>
#include <string>

namespace myriad {

struct GpuReading {
  double sm_utilization = -1;      // 0..1
  double memory_utilization = -1;  // 0..1
  double pcie_tx_bytes_per_s = -1, pcie_rx_bytes_per_s = -1;
  double pcie_max_bytes_per_s = -1;  // one direction at the current link generation and width
  double power_watts = -1;
  double sm_clock_mhz = -1, max_sm_clock_mhz = -1;
};

class GpuSampler {
 public:
  virtual ~GpuSampler() = default;
  virtual GpuReading read() = 0;  // thread-compatible: one reader at a time
  virtual std::string describe() const = 0;
};

// The GPU at `pci_bus_id` ("0000:3B:00.0", cudaDeviceGetPCIBusId's form); null when NVML cannot be
// loaded or does not know the device, with the reason in *why_not.
std::unique_ptr<GpuSampler> open_nvml_sampler(const std::string& pci_bus_id, std::string* why_not);

// PCIe bytes per second per direction of one lane at `generation` (1..6; 0 when unknown).
double pcie_lane_bytes_per_s(int generation);

// Field by field, the mean of the readings that reported it (-1 where none did).
GpuReading mean_reading(const GpuReading* readings, int count);
// (TX + RX) / (2 x one direction's maximum), 0..1; -1 when a term is not reported.
double pcie_share(const GpuReading& r);

}  // namespace myriad
