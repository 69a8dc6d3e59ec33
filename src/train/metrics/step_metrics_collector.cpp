// StepMetricsCollector: communication waits and bytes around a step, throughput, MFU, memory,
// stragglers and the metrics files.
#include "myriad/train/metrics/step_metrics_collector.h"

#include <algorithm>

#include "myriad/core/process_memory.h"
#include "myriad/train/config_wiring.h"

namespace myriad::train {

StepMetricsCollector::StepMetricsCollector(const RunConfig& config, distributed::ProcessGroups& groups,
                                           DeviceRuntime* device, PeakFlops peak, double flops_per_token,
                                           std::shared_ptr<spdlog::logger> log, std::unique_ptr<GpuSampler> gpu_sampler)
    : config_(config),
      groups_(groups),
      device_(device),
      peak_(std::move(peak)),
      flops_per_token_(flops_per_token),
      log_(std::move(log)),
      stragglers_(groups.world(), groups.grid(), config.logging.straggler_every, config.logging.straggler_margin) {
  if (groups.world().rank() == 0 && (config.logging.jsonl || config.logging.tensorboard)) {
    writer_ = std::make_unique<MetricsWriter>(config.logging.dir, config.logging.jsonl, config.logging.tensorboard);
  }
  if (gpu_sampler) gpu_ = std::make_unique<GpuMonitor>(std::move(gpu_sampler), std::chrono::milliseconds(100));
}

// Under context parallelism gradients reduce over the dp x cp group ("dcp"): its traffic is the
// data-parallel axis's.
distributed::CommOpStats StepMetricsCollector::data_context_stats() const {
  distributed::Communicator& dcp = groups_.data_context();
  if (&dcp == &groups_.group(distributed::Axis::dp)) return {};
  distributed::CommOpStats total = dcp.stats().total();
  if (device_) total += device_->data_context().stats().total();  // NCCL's (host values go over dcp)
  return total;
}

std::array<double, 6> StepMetricsCollector::wait_seconds() const {
  std::array<double, 6> waits{};
  for (std::size_t a = 0; a < distributed::kAxes.size(); ++a) {
    waits[a] = groups_.group(distributed::kAxes[a]).stats().total().wait_seconds;
    if (distributed::kAxes[a] == distributed::Axis::dp) waits[a] += data_context_stats().wait_seconds;
    if (device_) waits[a] += device_->group(distributed::kAxes[a]).stats().total().wait_seconds;  // NCCL's
  }
  waits[5] = groups_.world().stats().total().wait_seconds;
  return waits;
}

std::int64_t StepMetricsCollector::dp_bytes_sent() const {
  std::int64_t sent = groups_.group(distributed::Axis::dp).stats().total().bytes_sent + data_context_stats().bytes_sent;
  if (device_) sent += device_->group(distributed::Axis::dp).stats().total().bytes_sent;  // the NCCL dp group's
  return sent;
}

std::array<std::int64_t, 5> StepMetricsCollector::axis_bytes_sent() const {
  std::array<std::int64_t, 5> sent{};
  for (std::size_t a = 0; a < distributed::kAxes.size(); ++a) {
    sent[a] = groups_.group(distributed::kAxes[a]).stats().total().bytes_sent;
    if (distributed::kAxes[a] == distributed::Axis::dp) sent[a] += data_context_stats().bytes_sent;
    if (device_) sent[a] += device_->group(distributed::kAxes[a]).stats().total().bytes_sent;
  }
  return sent;
}

void StepMetricsCollector::begin() {
  if (gpu_) (void)gpu_->take();  // the readings between steps (evaluation, checkpoints) are not the step's
  waits_before_ = wait_seconds();
  bytes_before_ = dp_bytes_sent();
  axis_bytes_before_ = axis_bytes_sent();
}

void StepMetricsCollector::finish(StepMetrics& m, double data_wait, double bubble_seconds, const MemoryReport& mem) {
  if (gpu_) m.gpu = gpu_->take();
  m.comm_bytes = dp_bytes_sent() - bytes_before_;
  const std::array<std::int64_t, 5> axis_bytes = axis_bytes_sent();
  for (std::size_t a = 0; a < axis_bytes.size(); ++a) m.comm_axis_bytes[a] = axis_bytes[a] - axis_bytes_before_[a];
  const std::array<double, 6> waits_after = wait_seconds();
  m.comm_seconds = 0.0;
  for (std::size_t i = 0; i < waits_after.size(); ++i) {
    const double exposed = waits_after[i] - waits_before_[i];
    if (i < m.comm_axis_seconds.size()) m.comm_axis_seconds[i] = exposed;
    m.comm_seconds += exposed;  // the axes plus world-wide collectives (none on the step path today)
  }
  // The pipeline's receive waits are its bubble, not communication: moved out of the pp axis.
  const auto pp_axis = static_cast<std::size_t>(distributed::Axis::pp);
  const double bubble = std::min(bubble_seconds, m.comm_axis_seconds[pp_axis]);
  m.comm_axis_seconds[pp_axis] -= bubble;
  m.comm_seconds -= bubble;
  const TrainingConfig& t = config_.training;
  m.samples = static_cast<std::int64_t>(t.micro_batch) * t.gradient_accumulation * config_.parallel.dp;
  m.tokens = tokens_per_step(config_);
  m.data_wait_seconds = data_wait;
  m.bubble_seconds = bubble;
  m.compute_seconds = std::max(0.0, m.seconds - m.data_wait_seconds - m.comm_seconds - m.bubble_seconds);
  m.tokens_per_second = static_cast<double>(m.tokens) / m.seconds;
  m.samples_per_second = static_cast<double>(m.samples) / m.seconds;
  m.model_flops = flops_per_token_ * static_cast<double>(m.tokens);
  const double world = groups_.grid().world_size();
  if (peak_.mfu_peak > 0) m.mfu = m.model_flops / m.seconds / (world * peak_.mfu_peak);
  if (peak_.datasheet > 0) m.mfu_datasheet = m.model_flops / m.seconds / (world * peak_.datasheet);
  m.memory.parameters = mem.parameter_bytes;
  m.memory.gradients = mem.gradient_bytes;
  m.memory.optimizer = mem.optimizer_bytes;
  m.memory.activations = mem.activation_bytes;
  m.memory.workspace = mem.scratch_bytes + mem.comm_buffer_bytes;
  m.memory.rss_current = static_cast<std::int64_t>(current_rss_bytes());
  m.memory.rss_peak = static_cast<std::int64_t>(peak_rss_bytes());
  if (stragglers_.record(m.compute_seconds, m.rank_compute_seconds, m.stragglers) && groups_.world().rank() == 0) {
    for (const Straggler& s : m.stragglers) {
      log_->warn("straggler: rank {} ({}) on {}: compute {:.1f} ms/step vs median {:.1f} ms over the last {} steps",
                 s.rank, s.coords, s.host, s.compute_seconds * 1e3, s.median_seconds * 1e3,
                 config_.logging.straggler_every);
    }
  }
  if (writer_) writer_->write(m);
}

void StepMetricsCollector::write_eval(std::int64_t step, double val_loss) {
  if (writer_) writer_->write_eval(step, val_loss);
}

}  // namespace myriad::train
