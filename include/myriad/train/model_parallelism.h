// ModelParallelism — how one rank's model is cut from the layout: the regions through which its
// activations cross the tp, ep and cp groups (owned here) and the ModelSplit that points at them
// (its pipeline chunks, first/last stage, and the shard coordinate at which the shard plan gives
// it its part of every parameter). Made once, by the same function, for a training run, a dry run
// and the planner's parameter layout (rank_parameter_layout below), so all three cut alike.
//
// Invariant: `split` points into `tensor` / `expert` / `context`; move the struct, never copy the
// split out of it past its lifetime.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "myriad/config/run_config.h"
#include "myriad/distributed/process_groups.h"
#include "myriad/nn/model_split.h"
#include "myriad/nn/transformer_config.h"

namespace myriad::train {

struct ModelParallelism {
  std::unique_ptr<nn::TensorParallel> tensor;    // tp > 1
  std::unique_ptr<nn::ExpertParallel> expert;    // ep > 1
  std::unique_ptr<nn::ContextParallel> context;  // cp > 1
  nn::ModelSplit split;
};

// The layers of each model chunk that pipeline stage `stage` runs (interleaving: chunk c holds
// global stage c pp + stage), from ParallelConfig::stage_layers.
std::vector<std::vector<int>> stage_chunks(const ParallelConfig& parallel, int n_layer, int stage);

// `tp`, `ep`, `cp`: the groups that carry the model's tensors (host or device).
ModelParallelism make_model_parallelism(const RunConfig& config, const nn::TransformerConfig& model,
                                        distributed::Communicator& tp, distributed::Communicator& ep,
                                        distributed::Communicator& cp, int pp_stage);

// One rank's flat parameter buffer as the engine lays it out (nothing allocated: the meta device):
// the planner's memory model reads it through the bindings.
struct RankParameterLayout {
  struct Entry {
    std::string name;
    std::int64_t numel = 0, offset = 0;
    bool expert = false, primary = true;
  };
  std::string role;  // "rank 5 (tp 1, cp 0, ep 0, dp 2, pp 0)"
  int tp_rank = 0, cp_rank = 0, ep_rank = 0, dp_rank = 0, pp_stage = 0;
  std::vector<Entry> parameters;  // in registration order
  struct Unit {
    std::string name;
    std::int64_t begin = 0, end = 0;
    bool expert = false;
  };
  std::vector<Unit> units;
  std::vector<std::vector<int>> chunks;
  std::int64_t total = 0;  // elements of the flat buffer (64-byte aligned parameters)
};
RankParameterLayout rank_parameter_layout(const RunConfig& config, int world_size, int rank);

}  // namespace myriad::train
