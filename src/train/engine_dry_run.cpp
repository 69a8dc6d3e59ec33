// Engine::dry_run: one rank's part of a layout built at full size on the meta device, and the
// memory it would hold (train/dry_run.h).
#include <spdlog/logger.h>

#include "myriad/train/checkpoint/checkpointer.h"
#include "myriad/train/compose_rank.h"
#include "myriad/train/config_wiring.h"
#include "myriad/train/data/step_data.h"
#include "myriad/train/engine.h"
#include "myriad/train/inference_session.h"
#include "myriad/train/research_step.h"
#include "myriad/train/trainer.h"

namespace myriad::train {

namespace {
std::int64_t bytes_of(const Tensor& t) { return t.defined() ? static_cast<std::int64_t>(t.nbytes()) : 0; }
}  // namespace

Engine::Engine(const RunConfig& config, distributed::ProcessGroups& groups, ops::MetaBackend& meta) {
  state_.log = std::make_shared<spdlog::logger>("dry_run");
  state_.groups = &groups;
  const int world = state_.groups->grid().world_size();
  state_.config = config.for_world(world).resolved();
  state_.config.validate(world);
  compose_rank(state_, ops::Placement{&meta}, &meta);
  meta.set_label("activations");
  const std::int64_t local_T = state_.config.training.seq_len / state_.config.parallel.cp;
  const int slots = make_step_executor(state_, state_.config.training.gradient_accumulation)->slots_in_flight();
  state_.model->prepare(state_.config.training.micro_batch, local_T, state_.config.training.recompute, slots);
  meta.set_label("other");
}

DryRunReport Engine::dry_run(const RunConfig& config, int world_size, int rank) {
  MYRIAD_CHECK(world_size >= 1, "dry run: world size " << world_size << " must be >= 1");
  MYRIAD_CHECK(rank >= 0 && rank < world_size,
               "dry run: rank " << rank << " is not a rank of a world of " << world_size);
  const RunConfig settled = config.for_world(world_size);
  settled.resolved().validate(world_size);  // the layout must fill the world (names the keys otherwise)
  distributed::ProcessGroups groups =
      distributed::ProcessGroups::for_dry_run(grid_shape(settled.parallel, world_size), rank);
  ops::MetaBackend meta;
  DryRunReport r;
  {
    Engine engine(settled, groups, meta);
    const distributed::RankGrid& grid = groups.grid();
    const distributed::GridCoord coord = grid.coords(rank);
    r.rank = rank;
    r.world_size = world_size;
    r.role = grid.describe(rank);
    r.tp_rank = coord[distributed::Axis::tp];
    r.cp_rank = coord[distributed::Axis::cp];
    r.ep_rank = coord[distributed::Axis::ep];
    r.dp_rank = coord[distributed::Axis::dp];
    r.pp_stage = coord[distributed::Axis::pp];
    r.parameter_elements = engine.state_.model->parameters().numel();
    r.shard_elements = engine.state_.data_parallel->layout().shard_elements();
    r.optimizer_elements = engine.state_.data_parallel->optimizer().state_elements();
    const parallel::ShardedMemory held = engine.state_.data_parallel->resident();
    r.master_weight_bytes = held.parameter_bytes;
    r.compute_weight_bytes =
        bytes_of(engine.state_.compute_values) + bytes_of(engine.state_.compute_operands) + held.compute_copy_bytes;
    r.gradient_bytes = held.gradient_bytes;
    r.optimizer_bytes = held.optimizer_bytes;
    const auto& labels = meta.usage_by_label();
    if (auto it = labels.find("activations"); it != labels.end()) r.activation_bytes = it->second.live_bytes;
    r.activation_slots =
        make_step_executor(engine.state_, engine.state_.config.training.gradient_accumulation)->slots_in_flight();
    r.total_bytes = meta.usage().live_bytes;
    r.peak_bytes = meta.usage().peak_bytes;
    r.flops_per_token = engine.state_.model->flops_per_token(engine.state_.config.training.seq_len);
  }
  return r;
}

}  // namespace myriad::train
