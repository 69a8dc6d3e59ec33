// ModelParallelism: the regions and split of one rank's model, and its parameter layout for the
// planner (model_parallelism.h).
#include "myriad/train/model_parallelism.h"

#include "myriad/nn/gpt_model.h"
#include "myriad/ops/meta_backend.h"
#include "myriad/parallel/context_parallel_group.h"
#include "myriad/parallel/expert_parallel_group.h"
#include "myriad/parallel/tensor_parallel_regions.h"
#include "myriad/train/config_wiring.h"

namespace myriad::train {

std::vector<std::vector<int>> stage_chunks(const ParallelConfig& p, int n_layer, int stage) {
  const std::vector<int> per_stage = p.stage_layers(n_layer);
  std::vector<int> first_layer = {0};
  for (int count : per_stage) first_layer.push_back(first_layer.back() + count);
  std::vector<std::vector<int>> chunks;
  for (int chunk = 0; chunk < p.virtual_stages; ++chunk) {
    const int global_stage = chunk * p.pp + stage;  // interleaving: rank r holds stages r, r + pp, ...
    std::vector<int> layers;
    for (int l = first_layer[global_stage]; l < first_layer[global_stage + 1]; ++l) layers.push_back(l);
    chunks.push_back(std::move(layers));
  }
  return chunks;
}

ModelParallelism make_model_parallelism(const RunConfig& config, const nn::TransformerConfig& model,
                                        distributed::Communicator& tp, distributed::Communicator& ep,
                                        distributed::Communicator& cp, int pp_stage) {
  const ParallelConfig& p = config.parallel;
  ModelParallelism out;
  if (p.tp > 1) {  // the model's layers cross the tp group through these regions
    out.tensor = std::make_unique<parallel::TensorParallelRegions>(tp, p.sequence_parallel, model);
    out.split.tp = out.tensor.get();
  }
  if (p.ep > 1) {  // the MoE layers' experts split over the ep group, rows exchanged through it
    out.expert = std::make_unique<parallel::ExpertParallelGroup>(ep);
    out.split.ep = out.expert.get();
  }
  if (p.cp > 1) {  // the sequence split over the cp group, attention as a ring through it
    out.context = std::make_unique<parallel::ContextParallelGroup>(cp);
    out.split.cp = out.context.get();
  }
  out.split.chunks = stage_chunks(p, static_cast<int>(config.model.n_layer), pp_stage);
  out.split.first_stage = pp_stage == 0;
  out.split.last_stage = pp_stage == p.pp - 1;
  return out;
}

RankParameterLayout rank_parameter_layout(const RunConfig& config, int world_size, int rank) {
  MYRIAD_CHECK(world_size >= 1 && rank >= 0 && rank < world_size,
               "parameter layout: rank " << rank << " is not a rank of a world of " << world_size);
  const RunConfig settled = config.for_world(world_size).resolved();
  distributed::ProcessGroups groups =
      distributed::ProcessGroups::for_dry_run(grid_shape(settled.parallel, world_size), rank);
  const distributed::GridCoord coord = groups.grid().coords(rank);
  const nn::TransformerConfig model = transformer_config(settled.model, settled.model.vocab_size);
  ModelParallelism parallelism =
      make_model_parallelism(settled, model, groups.group(distributed::Axis::tp), groups.group(distributed::Axis::ep),
                             groups.group(distributed::Axis::cp), coord[distributed::Axis::pp]);
  ops::MetaBackend meta;
  const nn::GptModel built(model, parallelism.split, true, ops::Placement{&meta});
  RankParameterLayout out;
  out.role = groups.grid().describe(rank);
  out.tp_rank = coord[distributed::Axis::tp];
  out.cp_rank = coord[distributed::Axis::cp];
  out.ep_rank = coord[distributed::Axis::ep];
  out.dp_rank = coord[distributed::Axis::dp];
  out.pp_stage = coord[distributed::Axis::pp];
  for (const nn::Parameter& p : built.parameters().all()) {
    out.parameters.push_back({p.name, shape_numel(p.shape), p.offset, p.expert, p.primary});
  }
  for (const nn::ParamUnit& u : built.units()) out.units.push_back({u.name, u.begin, u.end, u.expert});
  out.chunks = parallelism.split.chunks;
  out.total = built.parameters().numel();
  return out;
}

}  // namespace myriad::train
