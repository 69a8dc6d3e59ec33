// StepMetrics as one JSON line (the metrics.jsonl schema of docs/metrics.md).
#include "myriad/train/metrics/step_metrics.h"

#include <nlohmann/json.hpp>

namespace myriad::train {

std::string step_metrics_json(const StepMetrics& m) {
  nlohmann::json j;
  j["kind"] = "train";
  j["step"] = m.step;
  j["loss"] = m.loss;
  j["lr"] = m.lr;
  j["grad_norm"] = m.grad_norm;
  j["skipped"] = m.skipped;
  j["loss_scale"] = m.loss_scale;
  if (m.fp8_saturated >= 0) j["fp8_saturated"] = m.fp8_saturated;
  j["tokens"] = m.tokens;
  j["samples"] = m.samples;
  if (!m.tokens_by_source.empty()) j["tokens_by_source"] = m.tokens_by_source;
  j["step_seconds"] = m.seconds;
  j["tokens_per_second"] = m.tokens_per_second;
  j["samples_per_second"] = m.samples_per_second;
  j["model_flops"] = m.model_flops;
  j["mfu"] = m.mfu;
  j["mfu_datasheet"] = m.mfu_datasheet;
  j["data_wait_seconds"] = m.data_wait_seconds;
  j["compute_seconds"] = m.compute_seconds;
  j["comm_seconds"] = m.comm_seconds;
  j["comm_share"] = m.seconds > 0 ? m.comm_seconds / m.seconds : 0.0;
  nlohmann::json axes, shares;
  for (std::size_t a = 0; a < kCommAxes.size(); ++a) {
    axes[kCommAxes[a]] = m.comm_axis_seconds[a];
    shares[kCommAxes[a]] = m.seconds > 0 ? m.comm_axis_seconds[a] / m.seconds : 0.0;
  }
  j["comm_axis_seconds"] = axes;
  j["comm_axis_share"] = shares;
  j["bubble_seconds"] = m.bubble_seconds;
  j["bubble_share"] = m.seconds > 0 ? m.bubble_seconds / m.seconds : 0.0;
  j["data_wait_share"] = m.seconds > 0 ? m.data_wait_seconds / m.seconds : 0.0;
  j["comm_bytes"] = m.comm_bytes;
  nlohmann::json axis_bytes;
  for (std::size_t a = 0; a < kCommAxes.size(); ++a) axis_bytes[kCommAxes[a]] = m.comm_axis_bytes[a];
  j["comm_axis_bytes"] = axis_bytes;
  if (!m.moe.empty()) {
    nlohmann::json layers = nlohmann::json::array();
    for (const MoeLayerMetrics& l : m.moe) {
      layers.push_back(
          {{"layer", l.layer},
           {"tokens_per_expert",
            {{"min", l.tokens_per_expert_min}, {"mean", l.tokens_per_expert_mean}, {"max", l.tokens_per_expert_max}}},
           {"dropped_share", l.dropped_share},
           {"aux_loss", l.aux_loss},
           {"z_loss", l.z_loss}});
    }
    j["moe"] = layers;
  }
  if (m.attention.block_sparse) {
    nlohmann::json a = {{"kept_blocks_per_query_block", m.attention.kept_blocks_per_query_block},
                        {"density", m.attention.density}};
    if (m.attention.selects) a["estimated_mass"] = m.attention.estimated_mass;
    j["attention"] = a;
  }
  j["memory"] = {{"parameters", m.memory.parameters}, {"gradients", m.memory.gradients},
                 {"optimizer", m.memory.optimizer},   {"activations", m.memory.activations},
                 {"workspace", m.memory.workspace},   {"rss_current", m.memory.rss_current},
                 {"rss_peak", m.memory.rss_peak}};
  if (m.gpu.readings > 0) {
    auto reported = [](double v) { return v >= 0 ? nlohmann::json(v) : nlohmann::json(nullptr); };
    j["gpu"] = {{"utilization", reported(m.gpu.sm_utilization)}, {"memory_bw", reported(m.gpu.memory_utilization)},
                {"pcie_bw", reported(m.gpu.pcie_utilization)},   {"power_watts", reported(m.gpu.power_watts)},
                {"sm_clock_mhz", reported(m.gpu.sm_clock_mhz)},  {"readings", m.gpu.readings}};
  }
  if (!m.rank_compute_seconds.empty()) j["rank_compute_seconds"] = m.rank_compute_seconds;
  nlohmann::json stragglers = nlohmann::json::array();
  for (const Straggler& s : m.stragglers) {
    stragglers.push_back({{"rank", s.rank},
                          {"coords", s.coords},
                          {"host", s.host},
                          {"compute_seconds", s.compute_seconds},
                          {"median_seconds", s.median_seconds}});
  }
  j["stragglers"] = stragglers;
  return j.dump();
}

std::string eval_metrics_json(std::int64_t step, double val_loss) {
  return nlohmann::json{{"kind", "eval"}, {"step", step}, {"val_loss", val_loss}}.dump();
}

}  // namespace myriad::train
