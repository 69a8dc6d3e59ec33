// The GPU fields of the step metrics over an emulated sampler (CI has no driver): per-step means of
// the readings taken in the background, fields a device does not report left out of the mean,
// PCIe utilisation as (TX + RX) over twice one direction's maximum, a step shorter than the
// sampling interval still read once, the metrics.jsonl "gpu" object (null for unreported fields),
// and NVML missing on this machine reported as a reason, not an error.
#include <gtest/gtest.h>

#include <atomic>
#include <nlohmann/json.hpp>
#include <thread>

#include "myriad/core/gpu_sampler.h"
#include "myriad/train/metrics/gpu_monitor.h"
#include "myriad/train/metrics/step_metrics.h"

namespace myriad::train {
namespace {

// Reading i: SM utilisation alternating 0.5 / 1.0, memory 0.25, PCIe 1 GB/s TX + 3 GB/s RX of an 8
// GB/s link, 400 W, 1980 MHz; power unreported on odd readings.
class ScriptedSampler final : public GpuSampler {
 public:
  explicit ScriptedSampler(std::atomic<int>* reads) : reads_(reads) {}
  GpuReading read() override {
    const int i = (*reads_)++;
    GpuReading r;
    r.sm_utilization = i % 2 == 0 ? 0.5 : 1.0;
    r.memory_utilization = 0.25;
    r.pcie_tx_bytes_per_s = 1e9;
    r.pcie_rx_bytes_per_s = 3e9;
    r.pcie_max_bytes_per_s = 8e9;
    r.power_watts = i % 2 == 0 ? 400.0 : -1.0;
    r.sm_clock_mhz = 1980.0;
    return r;
  }
  std::string describe() const override { return "scripted GPU"; }

 private:
  std::atomic<int>* reads_;
};

TEST(GpuMonitor, AveragesTheReportedFieldsOfEachReading) {
  std::atomic<int> reads{0};
  ScriptedSampler sampler(&reads);
  const GpuReading readings[] = {sampler.read(), sampler.read(), sampler.read(), sampler.read()};
  const GpuStepMetrics m = average_readings(readings, 4);
  EXPECT_EQ(m.readings, 4);
  EXPECT_DOUBLE_EQ(m.sm_utilization, 0.75);
  EXPECT_DOUBLE_EQ(m.memory_utilization, 0.25);
  EXPECT_DOUBLE_EQ(m.pcie_utilization, 4e9 / 16e9);
  EXPECT_DOUBLE_EQ(m.power_watts, 400.0);  // the two readings that reported it
  EXPECT_DOUBLE_EQ(m.sm_clock_mhz, 1980.0);
  GpuReading silent;  // a device that reports nothing
  const GpuStepMetrics none = average_readings(&silent, 1);
  EXPECT_EQ(none.sm_utilization, -1.0);
  EXPECT_EQ(none.pcie_utilization, -1.0);
}

TEST(GpuMonitor, EachTakeCoversTheReadingsSinceThePreviousOne) {
  std::atomic<int> reads{0};
  GpuMonitor monitor(std::make_unique<ScriptedSampler>(&reads), std::chrono::milliseconds(1));
  // 21 counted: the counter moves before its reading is stored, so one may still be in flight.
  while (reads.load() < 21) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const GpuStepMetrics first = monitor.take();
  EXPECT_GE(first.readings, 20);
  EXPECT_NEAR(first.sm_utilization, 0.75, 0.5 / first.readings + 1e-12);  // alternating 0.5 / 1.0
  EXPECT_DOUBLE_EQ(first.pcie_utilization, 0.25);
  const int after_first = reads.load();
  while (reads.load() < after_first + 5) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  const GpuStepMetrics second = monitor.take();
  EXPECT_GE(second.readings, 4);
  EXPECT_LT(second.readings, first.readings + 1000);  // not the first step's readings again
}

TEST(GpuMonitor, AStepShorterThanTheIntervalIsStillRead) {
  std::atomic<int> reads{0};
  GpuMonitor monitor(std::make_unique<ScriptedSampler>(&reads), std::chrono::hours(1));
  while (reads.load() < 1) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  EXPECT_EQ(monitor.take().readings, 1);       // the thread's first reading
  const GpuStepMetrics next = monitor.take();  // the thread sleeps for an hour: read now
  EXPECT_EQ(next.readings, 1);
  EXPECT_GT(next.sm_utilization, 0.0);
}

TEST(GpuMonitor, TheJsonLineCarriesTheGpuObjectOnlyWhenRead) {
  StepMetrics m;
  EXPECT_FALSE(nlohmann::json::parse(step_metrics_json(m)).contains("gpu"));
  m.gpu = GpuStepMetrics{.readings = 3,
                         .sm_utilization = 0.9,
                         .memory_utilization = 0.5,
                         .pcie_utilization = -1,
                         .power_watts = 650,
                         .sm_clock_mhz = 1980};
  const nlohmann::json j = nlohmann::json::parse(step_metrics_json(m));
  ASSERT_TRUE(j.contains("gpu"));
  EXPECT_DOUBLE_EQ(j["gpu"]["utilization"].get<double>(), 0.9);
  EXPECT_DOUBLE_EQ(j["gpu"]["memory_bw"].get<double>(), 0.5);
  EXPECT_TRUE(j["gpu"]["pcie_bw"].is_null());
  EXPECT_EQ(j["gpu"]["readings"].get<int>(), 3);
}

TEST(GpuMonitor, WithoutADriverNvmlSaysWhyInsteadOfFailing) {
  std::string why;
  const std::unique_ptr<GpuSampler> sampler = open_nvml_sampler("0000:00:00.0", &why);
  if (sampler) GTEST_SKIP() << "this machine has an NVIDIA driver: " << sampler->describe();
  EXPECT_FALSE(why.empty());
  EXPECT_DOUBLE_EQ(pcie_lane_bytes_per_s(5), 3.938e9);
  EXPECT_EQ(pcie_lane_bytes_per_s(0), 0.0);
}

}  // namespace
}  // namespace myriad::train
