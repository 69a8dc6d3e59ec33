// GpuSampler over NVML loaded with dlopen (gpu_sampler.h). The few NVML entry points used are
// declared here with their C signatures (NVML's handle is an opaque pointer; every call returns
// an int status, 0 = success), so no NVML header or library is needed to build.
#include "myriad/core/gpu_sampler.h"

#include <dlfcn.h>

#include <array>

namespace myriad {

namespace {

using NvmlDevice = void*;
struct NvmlUtilization {
  unsigned int gpu, memory;  // percent
};
constexpr int kNvmlSuccess = 0;
constexpr int kPcieTxBytes = 0, kPcieRxBytes = 1;  // nvmlPcieUtilCounter_t
constexpr int kClockSm = 1;                        // nvmlClockType_t

struct NvmlApi {
  int (*init)() = nullptr;
  int (*shutdown)() = nullptr;
  int (*by_pci_bus_id)(const char*, NvmlDevice*) = nullptr;
  int (*name)(NvmlDevice, char*, unsigned int) = nullptr;
  int (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  int (*pcie_throughput)(NvmlDevice, int, unsigned int*) = nullptr;
  int (*link_generation)(NvmlDevice, unsigned int*) = nullptr;
  int (*link_width)(NvmlDevice, unsigned int*) = nullptr;
  int (*power)(NvmlDevice, unsigned int*) = nullptr;
  int (*clock)(NvmlDevice, int, unsigned int*) = nullptr;
  int (*max_clock)(NvmlDevice, int, unsigned int*) = nullptr;
};

template <typename Fn>
bool bind_symbol(void* library, const char* symbol, Fn& out) {
  out = reinterpret_cast<Fn>(dlsym(library, symbol));
  return out != nullptr;
}

class NvmlSampler final : public GpuSampler {
 public:
  NvmlSampler(void* library, NvmlApi api, NvmlDevice device, std::string description)
      : library_(library), api_(api), device_(device), description_(std::move(description)) {}
  ~NvmlSampler() override {
    api_.shutdown();
    dlclose(library_);
  }
  NvmlSampler(const NvmlSampler&) = delete;
  NvmlSampler& operator=(const NvmlSampler&) = delete;

  GpuReading read() override {
    GpuReading r;
    NvmlUtilization u{};
    if (api_.utilization(device_, &u) == kNvmlSuccess) {
      r.sm_utilization = u.gpu / 100.0;
      r.memory_utilization = u.memory / 100.0;
    }
    unsigned int value = 0;
    if (api_.pcie_throughput(device_, kPcieTxBytes, &value) == kNvmlSuccess) r.pcie_tx_bytes_per_s = value * 1024.0;
    if (api_.pcie_throughput(device_, kPcieRxBytes, &value) == kNvmlSuccess) r.pcie_rx_bytes_per_s = value * 1024.0;
    unsigned int generation = 0, width = 0;
    if (api_.link_generation(device_, &generation) == kNvmlSuccess &&
        api_.link_width(device_, &width) == kNvmlSuccess && pcie_lane_bytes_per_s(static_cast<int>(generation)) > 0)
      r.pcie_max_bytes_per_s = width * pcie_lane_bytes_per_s(static_cast<int>(generation));
    if (api_.power(device_, &value) == kNvmlSuccess) r.power_watts = value / 1000.0;
    if (api_.clock(device_, kClockSm, &value) == kNvmlSuccess) r.sm_clock_mhz = value;
    if (api_.max_clock(device_, kClockSm, &value) == kNvmlSuccess) r.max_sm_clock_mhz = value;
    return r;
  }
  std::string describe() const override { return description_; }

 private:
  void* library_;
  NvmlApi api_;
  NvmlDevice device_;
  std::string description_;
};

}  // namespace

double pcie_lane_bytes_per_s(int generation) {
  // Per lane and direction after line coding: 2.5 and 5 GT/s with 8b/10b, then 128b/130b from
  // generation 3 (8, 16, 32 GT/s), and 64 GT/s PAM4 with FLIT encoding at generation 6.
  constexpr std::array<double, 7> kGBps = {0.0, 0.25, 0.5, 0.985, 1.969, 3.938, 7.563};
  if (generation < 1 || generation >= static_cast<int>(kGBps.size())) return 0.0;
  return kGBps[static_cast<std::size_t>(generation)] * 1e9;
}

GpuReading mean_reading(const GpuReading* readings, int count) {
  GpuReading out;
  for (double GpuReading::*field :
       {&GpuReading::sm_utilization, &GpuReading::memory_utilization, &GpuReading::pcie_tx_bytes_per_s,
        &GpuReading::pcie_rx_bytes_per_s, &GpuReading::pcie_max_bytes_per_s, &GpuReading::power_watts,
        &GpuReading::sm_clock_mhz, &GpuReading::max_sm_clock_mhz}) {
    double sum = 0.0;
    int reported = 0;
    for (int i = 0; i < count; ++i) {
      if (readings[i].*field >= 0) {
        sum += readings[i].*field;
        ++reported;
      }
    }
    out.*field = reported > 0 ? sum / reported : -1.0;
  }
  return out;
}

double pcie_share(const GpuReading& r) {
  if (r.pcie_tx_bytes_per_s < 0 || r.pcie_rx_bytes_per_s < 0 || r.pcie_max_bytes_per_s <= 0) return -1.0;
  return (r.pcie_tx_bytes_per_s + r.pcie_rx_bytes_per_s) / (2.0 * r.pcie_max_bytes_per_s);
}

std::unique_ptr<GpuSampler> open_nvml_sampler(const std::string& pci_bus_id, std::string* why_not) {
  auto fail = [why_not](std::string reason) -> std::unique_ptr<GpuSampler> {
    if (why_not != nullptr) *why_not = std::move(reason);
    return nullptr;
  };
  void* library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (library == nullptr) return fail("libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)");
  NvmlApi api;
  const bool bound = bind_symbol(library, "nvmlInit_v2", api.init) &&
                     bind_symbol(library, "nvmlShutdown", api.shutdown) &&
                     bind_symbol(library, "nvmlDeviceGetHandleByPciBusId_v2", api.by_pci_bus_id) &&
                     bind_symbol(library, "nvmlDeviceGetName", api.name) &&
                     bind_symbol(library, "nvmlDeviceGetUtilizationRates", api.utilization) &&
                     bind_symbol(library, "nvmlDeviceGetPcieThroughput", api.pcie_throughput) &&
                     bind_symbol(library, "nvmlDeviceGetCurrPcieLinkGeneration", api.link_generation) &&
                     bind_symbol(library, "nvmlDeviceGetCurrPcieLinkWidth", api.link_width) &&
                     bind_symbol(library, "nvmlDeviceGetPowerUsage", api.power) &&
                     bind_symbol(library, "nvmlDeviceGetClockInfo", api.clock) &&
                     bind_symbol(library, "nvmlDeviceGetMaxClockInfo", api.max_clock);
  if (!bound) {
    dlclose(library);
    return fail("libnvidia-ml.so.1 lacks an NVML entry point myriad uses (a driver older than NVML v2)");
  }
  if (const int status = api.init(); status != kNvmlSuccess) {
    dlclose(library);
    return fail("nvmlInit_v2 failed with status " + std::to_string(status));
  }
  NvmlDevice device = nullptr;
  if (const int status = api.by_pci_bus_id(pci_bus_id.c_str(), &device); status != kNvmlSuccess) {
    api.shutdown();
    dlclose(library);
    return fail("NVML does not know the GPU at PCI bus id " + pci_bus_id + " (status " + std::to_string(status) + ")");
  }
  std::array<char, 96> name{};
  const bool named = api.name(device, name.data(), static_cast<unsigned int>(name.size())) == kNvmlSuccess;
  return std::make_unique<NvmlSampler>(library, api, device,
                                       std::string(named ? name.data() : "GPU") + " at " + pci_bus_id + " (NVML)");
}

}  // namespace myriad
