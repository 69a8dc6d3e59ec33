// zero_memory_formula: the ZeRO memory table (sharded_state.h), one row per stage.
#include "myriad/parallel/sharded_state.h"

#include "myriad/core/error.h"

namespace myriad::parallel {

namespace {
// Which of the f32 buffers a stage holds in full (Ψ elements) and as this rank's shard.
struct StageRow {
  bool full_values, shard_values, full_grads, shard_grads, full_moments;
};
constexpr StageRow kStageRows[] = {{true, false, true, false, true},    // 0 replicated
                                   {true, false, true, true, false},    // 1 sharded optimizer state
                                   {true, false, false, true, false},   // 2 sharded gradients
                                   {false, true, false, true, false}};  // 3 sharded parameters
}  // namespace

ShardedMemory zero_memory_formula(std::int64_t psi, std::int64_t shard, int stage) {
  MYRIAD_CHECK(stage >= 0 && stage <= 3, "parallel.zero_stage " << stage << " is not one of 0, 1, 2, 3");
  const StageRow& row = kStageRows[stage];
  constexpr std::int64_t f32 = 4;
  ShardedMemory m;
  m.parameter_bytes = f32 * ((row.full_values ? psi : 0) + (row.shard_values ? shard : 0));
  m.gradient_bytes = f32 * ((row.full_grads ? psi : 0) + (row.shard_grads ? shard : 0));
  m.optimizer_bytes = 2 * f32 * (row.full_moments ? psi : shard);
  return m;
}

}  // namespace myriad::parallel
