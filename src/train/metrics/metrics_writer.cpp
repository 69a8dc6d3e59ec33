// MetricsWriter: JSONL lines and TensorBoard scalars per step and per evaluation.
#include "myriad/train/metrics/metrics_writer.h"

#include <filesystem>

#include "myriad/core/error.h"

namespace myriad::train {

MetricsWriter::MetricsWriter(const std::string& dir, bool jsonl, bool tensorboard) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  MYRIAD_CHECK(!ec, "metrics: cannot create logging.dir " << dir << ": " << ec.message());
  if (jsonl) {
    jsonl_path_ = (std::filesystem::path(dir) / "metrics.jsonl").string();
    jsonl_.open(jsonl_path_, std::ios::app);
    MYRIAD_CHECK(jsonl_, "metrics: cannot append to " << jsonl_path_);
  }
  if (tensorboard)
    tensorboard_ = std::make_unique<TensorBoardWriter>((std::filesystem::path(dir) / "tensorboard").string());
}

void MetricsWriter::write(const StepMetrics& m) {
  if (jsonl_.is_open()) {
    jsonl_ << step_metrics_json(m) << '\n';
    jsonl_.flush();
  }
  if (!tensorboard_) return;
  const double share = m.seconds > 0 ? 1.0 / m.seconds : 0.0;
  std::vector<std::pair<std::string, double>> scalars = {
      {"train/loss", m.loss},
      {"train/lr", m.lr},
      {"train/grad_norm", m.grad_norm},
      {"perf/tokens_per_second", m.tokens_per_second},
      {"perf/samples_per_second", m.samples_per_second},
      {"perf/step_seconds", m.seconds},
      {"perf/mfu", m.mfu},
      {"perf/mfu_datasheet", m.mfu_datasheet},
      {"perf/data_wait_share", m.data_wait_seconds * share},
      {"perf/bubble_share", m.bubble_seconds * share},
      {"comm/share", m.comm_seconds * share},
      {"memory/rss_current_mib", static_cast<double>(m.memory.rss_current) / 1048576.0},
      {"memory/rss_peak_mib", static_cast<double>(m.memory.rss_peak) / 1048576.0},
  };
  for (std::size_t a = 0; a < kCommAxes.size(); ++a) {
    scalars.emplace_back(std::string("comm/") + kCommAxes[a] + "_share", m.comm_axis_seconds[a] * share);
  }
  const std::pair<const char*, double> gpu[] = {{"gpu/utilization", m.gpu.sm_utilization},
                                                {"gpu/memory_bw", m.gpu.memory_utilization},
                                                {"gpu/pcie_bw", m.gpu.pcie_utilization},
                                                {"gpu/power_watts", m.gpu.power_watts},
                                                {"gpu/sm_clock_mhz", m.gpu.sm_clock_mhz}};
  for (const auto& [tag, value] : gpu) {
    if (m.gpu.readings > 0 && value >= 0) scalars.emplace_back(tag, value);
  }
  tensorboard_->add_scalars(m.step, scalars);
}

void MetricsWriter::write_eval(std::int64_t step, double val_loss) {
  if (jsonl_.is_open()) {
    jsonl_ << eval_metrics_json(step, val_loss) << '\n';
    jsonl_.flush();
  }
  if (tensorboard_) {
    tensorboard_->add_scalars(step, {{"val/loss", val_loss}});
    tensorboard_->flush();
  }
}

}  // namespace myriad::train
