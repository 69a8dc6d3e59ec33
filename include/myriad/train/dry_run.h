// DryRunReport — what one rank of a layout would hold, counted by building that rank's part of
// the engine at full size on the meta device (ops/meta_backend.h) on one process: the model split
// for the rank's grid coordinates, DataParallel (ZeRO shard, AdamW moments), the compute copy of
// the weights and the activation buffers of the rank's pipeline schedule (as many micro-batch
// slots as it keeps in flight). No data is read, nothing is initialised or communicated.
//
// The breakdown is read from the objects built (tensor sizes); `total_bytes` is what the meta
// backend counted as live after construction, and equals the sum of the parts (the test checks
// it: anything allocated that the breakdown misses shows as a difference). Transient buffers of a
// step (ZeRO-3 gathers, per-op scratch inside kernels, MoE routing buffers sized by the routing)
// are not part of it; `peak_bytes` is the meta backend's peak during construction.
#pragma once

#include <cstdint>
#include <string>

namespace myriad::train {

struct DryRunReport {
  int rank = 0, world_size = 1;
  std::string role;  // "rank 5 (tp 1, cp 0, ep 0, dp 2, pp 0)"
  int tp_rank = 0, cp_rank = 0, ep_rank = 0, dp_rank = 0, pp_stage = 0;
  std::int64_t parameter_elements = 0;    // the rank's flat parameter buffer (64-byte aligned parameters)
  std::int64_t shard_elements = 0;        // its ZeRO shard (= parameter_elements at ZeRO 0)
  std::int64_t optimizer_elements = 0;    // elements whose AdamW moments it keeps
  std::int64_t master_weight_bytes = 0;   // f32 weights: the flat buffer, or the ZeRO-3 shard
  std::int64_t compute_weight_bytes = 0;  // bf16/fp16 runs: the rounded copy the model reads and its 16-bit twin
  std::int64_t gradient_bytes = 0;        // f32: the flat buffer (ZeRO 0/1) and/or the shard (ZeRO >= 1)
  std::int64_t optimizer_bytes = 0;       // AdamW m and v, f32
  std::int64_t activation_bytes = 0;      // micro-batch slots and shared buffers (GptModel::prepare)
  int activation_slots = 0;               // micro-batches in flight at once in the rank's schedule
  std::int64_t total_bytes = 0;           // live on the meta device after construction
  std::int64_t peak_bytes = 0;            // its peak during construction
  double flops_per_token = 0;             // GptModel::flops_per_token(seq_len): what the run's MFU counts
};

}  // namespace myriad::train
