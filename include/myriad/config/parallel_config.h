// ParallelConfig — the `parallel:` section: how the world of ranks is split.
//
// The world is dp * tp * pp * cp ranks (grid axes tp fastest, pp slowest: see distributed/rank_grid.h);
// expert parallelism splits each group of ep data-parallel replicas' experts (ep divides dp).
// validate(world_size) checks the degrees against the number of launched processes; checks that
// also need the model or batch (heads % tp, layers % pp, ...) are in RunConfig::validate.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "myriad/config/choices.h"
#include "myriad/config/field.h"

namespace myriad {

struct ParallelConfig {
  static constexpr std::string_view kSection = "parallel";
  static constexpr std::string_view kSectionMeaning = "how the ranks are split into parallel groups";

  int dp = 0;                      // data-parallel replicas; 0 = auto: world / (tp * pp * cp)
  int tp = 1;                      // tensor-parallel ranks (split heads, MLP width, vocabulary)
  int pp = 1;                      // pipeline stages
  int cp = 1;                      // context-parallel ranks (split the sequence in attention)
  int ep = 1;                      // expert-parallel ranks, inside dp (split MoE experts)
  int zero_stage = 0;              // ZeRO over dp: 0 off, 1 optimizer states, 2 + gradients, 3 + parameters
  bool sequence_parallel = false;  // shard norms/dropout activations over tp along the sequence (no effect at tp 1)
  int virtual_stages = 1;          // model chunks per pipeline rank (> 1 only with the interleaved schedule)
  PipelineSchedule pp_schedule = PipelineSchedule::one_f_one_b;  // 1f1b | gpipe | interleaved
  std::vector<std::string> pp_layers;  // layers per global pipeline stage (pp * virtual_stages entries); empty = even
  double bucket_mb = 8.0;
  DpReduce dp_reduce = DpReduce::automatic;  // gradient all-reduce: auto | ring | tree | hierarchical
  int ranks_per_node = 0;                    // 0 = nodes from the host names; > 0 simulates nodes of that many ranks
  bool dp_reduce_exact = false;       // f32 gradient sums exact: the same bits for every algorithm and node count
  double collective_timeout = 600.0;  // seconds a collective may run before the watchdog reports and aborts; 0 = off

  // dp * tp * pp * cp (0 while dp is auto): the world.
  long long degree_product() const;
  // dp, or for dp 0 (auto) world_size / (tp * pp * cp); throws naming the numbers when that
  // does not divide.
  int dp_for_world(int world_size) const;
  // Layers of each global pipeline stage (stage g = chunk * pp + pipeline rank): pp_layers, or an
  // even split. Throws naming the numbers unless every stage has >= 1 layer and the counts sum to
  // n_layer (no layer dropped or duplicated).
  std::vector<int> stage_layers(int n_layer) const;

  // Per-key checks; the product of the degrees equals `world_size` (the message names every
  // factor; dp auto takes what divides); interleaved <=> virtual_stages > 1 (and then pp > 1); ZeRO 2/3 not with pp
  // > 1.
  void validate(int world_size) const;

  static const std::vector<Field<ParallelConfig>>& fields();
  bool operator==(const ParallelConfig&) const = default;
};

}  // namespace myriad
