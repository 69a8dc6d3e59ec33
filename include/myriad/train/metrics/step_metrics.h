// Folder train/metrics/ — what a run measures and where it goes: one step's numbers (this
// header), their collection over the step's phases and ranks (step_metrics_collector.h), MoE and
// attention statistics, memory by role (memory_report.h), the peak FLOP/s MFU divides by
// (peak_flops.h), straggler detection, and the JSONL and TensorBoard writers. Measuring never
// changes what is computed.
//
// StepMetrics — everything measured about one optimizer step (docs/metrics.md defines each).
//
// Times are this rank's wall seconds. seconds = data_wait + compute + comm (exposed) + bubble,
// where comm is the time the step was blocked waiting on communication, split by axis, and
// compute is the rest. Throughput and MFU count the global batch over this rank's step time
// (ranks run in lock-step), MFU against the per-rank peak times the world size. Memory is this
// rank's: the engine's accounting by category plus the process's resident set (current, peak).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

namespace myriad::train {

inline constexpr std::array<const char*, 5> kCommAxes = {"tp", "cp", "ep", "dp", "pp"};

struct Straggler {
  int rank = 0;
  std::string coords;  // "tp 0, cp 0, ep 0, dp 1, pp 0"
  std::string host;
  double compute_seconds = 0.0;  // mean per step over the window
  double median_seconds = 0.0;   // median over ranks of the same
};

struct MemoryBreakdown {
  std::int64_t parameters = 0, gradients = 0, optimizer = 0, activations = 0, workspace = 0;
  std::int64_t rss_current = 0, rss_peak = 0;  // resident set of this process (bytes)
};

// One MoE layer's routing over the global batch (train/metrics/moe_metrics.h).
struct MoeLayerMetrics {
  int layer = 0;
  double tokens_per_expert_min = 0.0, tokens_per_expert_mean = 0.0, tokens_per_expert_max = 0.0;
  double dropped_share = 0.0;  // assignments dropped over capacity / all assignments
  double aux_loss = 0.0;       // load-balancing loss, mean per sequence
  double z_loss = 0.0;         // router z-loss, mean per token
};

// Block-sparse attention over the global batch (train/metrics/attention_metrics.h).
struct AttentionMetrics {
  bool block_sparse = false;
  double kept_blocks_per_query_block = 0.0;
  double density = 0.0;         // kept blocks / the blocks dense causal attention reads
  bool selects = false;         // the per-head selection ran (sparse_ratio > 0)
  double estimated_mass = 0.0;  // mean estimated attention share of the kept past blocks
};

// The GPU's readings averaged over the step (training.device cuda with NVML; gpu_monitor.h):
// readings 0 = none. Each field -1 when the device does not report it.
struct GpuStepMetrics {
  int readings = 0;
  double sm_utilization = -1;      // 0..1 (GPU Util)
  double memory_utilization = -1;  // 0..1 (Memory BW: the share of time device memory was busy)
  double pcie_utilization = -1;    // 0..1: (TX + RX) / (2 x one direction's maximum) (Pcie BW)
  double power_watts = -1;
  double sm_clock_mhz = -1;
};

struct StepMetrics {
  std::int64_t step = 0;  // optimizer steps completed after this one
  double loss = 0.0;      // mean loss over the valid tokens of the global batch
  float lr = 0.0f;
  double grad_norm = 0.0;                      // before clipping
  bool skipped = false;                        // non-finite gradients: update skipped
  double loss_scale = 1.0;                     // the loss scale of this step (fp16; 1 otherwise)
  int fp8_saturated = -1;                      // fp8: tensors clipped by their delayed scale (-1: not fp8)
  std::int64_t tokens = 0;                     // tokens of the global batch (all dp ranks)
  std::int64_t samples = 0;                    // sequences of the global batch
  std::vector<std::int64_t> tokens_by_source;  // data.sources: target tokens of the global batch per source
  double seconds = 0.0;                        // wall time of the step on this rank
  double tokens_per_second = 0.0, samples_per_second = 0.0;
  double model_flops = 0.0;                       // model FLOPs of the global batch (6N + attention, docs/metrics.md)
  double mfu = 0.0;                               // model FLOP/s / (world size * per-rank MFU peak, peak_flops.h)
  double mfu_datasheet = 0.0;                     // the same over the datasheet / configured peak
  double data_wait_seconds = 0.0;                 // filling the batch (sampler + shard reads)
  double compute_seconds = 0.0;                   // seconds - data wait - exposed comm - bubble
  double comm_seconds = 0.0;                      // exposed communication, all axes
  std::array<double, 5> comm_axis_seconds{};      // exposed, by axis in kCommAxes order
  double bubble_seconds = 0.0;                    // pipeline bubble (0 without pipeline parallelism)
  std::int64_t comm_bytes = 0;                    // bytes this rank sent during the step
  std::array<std::int64_t, 5> comm_axis_bytes{};  // the same by axis (kCommAxes order): ep = MoE all-to-all
  std::vector<MoeLayerMetrics> moe;               // per MoE layer of the model (empty for a dense model)
  AttentionMetrics attention;                     // block-sparse attention only
  MemoryBreakdown memory;
  GpuStepMetrics gpu;                        // training.device cuda with NVML
  std::vector<double> rank_compute_seconds;  // every rank's mean compute time (straggler-check steps only)
  std::vector<Straggler> stragglers;         // ranks reported at this step
};

// One JSON object (one line, no newline) with every field; the schema is in docs/metrics.md.
std::string step_metrics_json(const StepMetrics& m);
// {"kind": "eval", "step": N, "val_loss": x}
std::string eval_metrics_json(std::int64_t step, double val_loss);

}  // namespace myriad::train
