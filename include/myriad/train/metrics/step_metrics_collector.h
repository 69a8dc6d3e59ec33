// StepMetricsCollector — what the Engine measures around each step, apart from the step itself:
// the exposed communication per axis (waits on the host groups and, with training.device cuda, on
// the device's groups), the bytes the dp group sent, throughput and MFU against the peak, memory,
// straggler detection (collective over the world at its interval) and the metrics files (world
// rank 0), and with training.device cuda the GPU's readings over the step (GpuMonitor over NVML,
// when the driver's library loads; the start-up log says why when not). begin() before the
// step's first communication, finish() after its optimizer update.
#pragma once

#include <array>
#include <memory>

#include <spdlog/logger.h>

#include "myriad/config/run_config.h"
#include "myriad/distributed/process_groups.h"
#include "myriad/train/device_runtime.h"
#include "myriad/train/metrics/gpu_monitor.h"
#include "myriad/train/metrics/memory_report.h"
#include "myriad/train/metrics/metrics_writer.h"
#include "myriad/train/metrics/peak_flops.h"
#include "myriad/train/metrics/step_metrics.h"
#include "myriad/train/metrics/straggler_detector.h"

namespace myriad::train {

class StepMetricsCollector {
 public:
  // `groups`, `device` (may be null) and `log` outlive the collector. `flops_per_token`: the
  // model's at training.seq_len; `peak`: the per-rank peak (logging.measure_peak / peak_tflops).
  // `gpu_sampler`: the device's readings (null: none; the Trainer opens NVML for the rank's GPU).
  StepMetricsCollector(const RunConfig& config, distributed::ProcessGroups& groups, DeviceRuntime* device,
                       PeakFlops peak, double flops_per_token, std::shared_ptr<spdlog::logger> log,
                       std::unique_ptr<GpuSampler> gpu_sampler = nullptr);

  void begin();
  // Completes `m` (loss, lr, grad norm, step and skipped already set): times, throughput, MFU,
  // memory, communication since begin(), stragglers; writes it to the metrics files.
  void finish(StepMetrics& m, double data_wait_seconds, double bubble_seconds, const MemoryReport& memory);
  void write_eval(std::int64_t step, double val_loss);

  const PeakFlops& peak() const { return peak_; }
  std::string metrics_path() const { return writer_ ? writer_->jsonl_path() : std::string(); }

 private:
  std::array<double, 6> wait_seconds() const;  // cumulative wait per axis (kCommAxes order), then world
  std::int64_t dp_bytes_sent() const;
  distributed::CommOpStats data_context_stats() const;
  std::array<std::int64_t, 5> axis_bytes_sent() const;  // cumulative, kCommAxes order

  RunConfig config_;
  distributed::ProcessGroups& groups_;
  DeviceRuntime* device_;
  PeakFlops peak_;
  double flops_per_token_;
  std::shared_ptr<spdlog::logger> log_;
  StragglerDetector stragglers_;
  std::unique_ptr<MetricsWriter> writer_;  // world rank 0 only
  std::array<double, 6> waits_before_{};
  std::int64_t bytes_before_ = 0;
  std::array<std::int64_t, 5> axis_bytes_before_{};
  std::unique_ptr<GpuMonitor> gpu_;  // training.device cuda with NVML
};

}  // namespace myriad::train
