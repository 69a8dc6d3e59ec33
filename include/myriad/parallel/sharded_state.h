// The state of data parallelism as it leaves and enters it: the full flat layout of checkpoints
// (FullState), this rank's owned part (OwnedState), and the memory accounting of a ZeRO stage
// (ShardedMemory; zero_memory_formula is the table of docs/parallelism.md). Plain data.
#pragma once

#include <cstdint>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/parallel/zero_layout.h"

namespace myriad::parallel {

// Parameters and AdamW moments in the flat full layout (padding between parameters is 0).
struct FullState {
  Tensor values, m, v;
};

// The part of the state this rank owns (its ZeRO shard; everything at ZeRO 0), packed: segment
// after segment (flat ranges of whole or partial parameters), values and AdamW moments alike.
struct OwnedState {
  Tensor values, m, v;
  Tensor outer_momentum;                        // local SGD only (packed like values); undefined otherwise
  std::vector<parallel::ZeroSegment> segments;  // shard_position = where the segment starts in the packed buffers
};

struct ShardedMemory {
  std::int64_t parameter_bytes = 0;     // resident parameter values (full, or the shard at stage 3)
  std::int64_t gradient_bytes = 0;      // resident gradients (full and/or shard)
  std::int64_t optimizer_bytes = 0;     // AdamW m and v of the owned elements
  std::int64_t buffer_peak_bytes = 0;   // peak of transient gathered values / unit gradient buffers
  std::int64_t compute_copy_bytes = 0;  // ZeRO 3, bf16/fp16: the shard rounded to the compute format
};

// f32 bytes per rank of ZeRO `stage` (0-3) for `psi` flat elements of which `shard` are this
// rank's: values 4Ψ (4·shard at 3), gradients 4Ψ / 4Ψ + 4·shard / 4·shard / 4·shard, moments 8Ψ
// (8·shard from 1). Refuses another stage.
ShardedMemory zero_memory_formula(std::int64_t psi, std::int64_t shard, int stage);

}  // namespace myriad::parallel
