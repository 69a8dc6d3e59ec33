// NVML read through core/gpu_sampler.h on the GPU the CUDA runtime uses (found by its PCI bus id):
// every field the monitoring line shows is reported and in range while device copies run.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <array>

#include "gpu_test_support.h"
#include "myriad/core/gpu_sampler.h"

namespace myriad {
namespace {

TEST(GpuSampler, NvmlReadsTheDeviceTheRuntimeUses) {
  MYRIAD_REQUIRE_GPU();
  std::array<char, 32> bus{};
  ASSERT_EQ(cudaDeviceGetPCIBusId(bus.data(), static_cast<int>(bus.size()), 0), cudaSuccess);
  std::string why;
  const std::unique_ptr<GpuSampler> sampler = open_nvml_sampler(bus.data(), &why);
  ASSERT_NE(sampler, nullptr) << why;
  void* a = nullptr;
  void* b = nullptr;
  constexpr std::size_t kBytes = std::size_t{256} << 20;
  ASSERT_EQ(cudaMalloc(&a, kBytes), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&b, kBytes), cudaSuccess);
  for (int i = 0; i < 50; ++i) cudaMemcpyAsync(b, a, kBytes, cudaMemcpyDeviceToDevice);
  const GpuReading r = sampler->read();
  cudaDeviceSynchronize();
  cudaFree(a);
  cudaFree(b);
  EXPECT_GE(r.sm_utilization, 0.0);
  EXPECT_LE(r.sm_utilization, 1.0);
  EXPECT_GE(r.memory_utilization, 0.0);
  EXPECT_LE(r.memory_utilization, 1.0);
  EXPECT_GT(r.power_watts, 0.0);
  EXPECT_GT(r.sm_clock_mhz, 0.0);
  EXPECT_GE(r.max_sm_clock_mhz, r.sm_clock_mhz);
  EXPECT_GT(r.pcie_max_bytes_per_s, 0.0);
  EXPECT_GE(r.pcie_tx_bytes_per_s, 0.0);
  EXPECT_NE(sampler->describe().find(bus.data()), std::string::npos);
}

}  // namespace
}  // namespace myriad
