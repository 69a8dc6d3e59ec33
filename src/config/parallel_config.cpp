// ParallelConfig: its key table and the checks of the degrees against the world size.
#include "myriad/config/parallel_config.h"

#include "myriad/core/error.h"

namespace myriad {

const std::vector<Field<ParallelConfig>>& ParallelConfig::fields() {
  using P = ParallelConfig;
  static const std::vector<Field<P>> table = {
      make_field("dp", &P::dp, "data-parallel replicas; 0 = auto: the world size / (tp * pp * cp)",
                 {.check = at_least(0)}),
      make_field("tp", &P::tp, "tensor-parallel ranks (split heads, MLP width and vocabulary)", {.check = at_least(1)}),
      make_field("pp", &P::pp, "pipeline stages (split the layers)", {.check = at_least(1)}),
      make_field("cp", &P::cp,
                 "context-parallel ranks: each holds two chunks of every sequence (one early, one late) and "
                 "attention runs as a ring over them (docs/parallelism.md)",
                 {.check = at_least(1)}),
      make_field("ep", &P::ep,
                 "expert-parallel ranks: MoE experts split over groups of ep data-parallel replicas (divides dp)",
                 {.check = at_least(1)}),
      make_field("zero_stage", &P::zero_stage, "ZeRO over dp: 0 off, 1 optimizer states, 2 + gradients, 3 + parameters",
                 {.check = in_range(0, 3, true, true)}),
      make_field("sequence_parallel", &P::sequence_parallel,
                 "shard the norms' activations over tp along the sequence (no effect at tp 1)"),
      make_field("virtual_stages", &P::virtual_stages,
                 "model chunks per pipeline rank; > 1 only with pp_schedule interleaved", {.check = at_least(1)}),
      make_field("pp_schedule", &P::pp_schedule, "pipeline schedule"),
      make_field("pp_layers", &P::pp_layers,
                 "layers per pipeline stage, one entry per global stage (pp * virtual_stages, stage g = chunk * pp "
                 "+ rank), e.g. [3, 5]; empty = an even split",
                 {.repeats = true}),
      make_field("bucket_mb", &P::bucket_mb,
                 "data-parallel gradient bucket in MiB, each reduced as soon as its gradients are final (overlapping "
                 "backward); 0 = one reduction after the whole backward (ZeRO 0/1; stages 2/3 reduce per layer)",
                 {.check = at_least(0)}),
      make_field("dp_reduce", &P::dp_reduce,
                 "algorithm of the data-parallel gradient reductions (host groups; on cuda NCCL's own unless "
                 "`hierarchical`, and `tree` is refused: docs/parallelism.md): ring, tree (binomial reduce + "
                 "broadcast: latency-bound sizes), hierarchical (intra-node reduce-scatter, inter-node all-reduce, "
                 "intra-node all-gather), or auto = hierarchical when the group spans nodes with several members on "
                 "each, ring otherwise (docs/parallelism.md)"),
      make_field("ranks_per_node", &P::ranks_per_node,
                 "ranks per node for hierarchical reductions: 0 = find the nodes from the host names; > 0 simulates "
                 "nodes of that many consecutive ranks (studies on one machine)",
                 {.check = at_least(0)}),
      make_field("dp_reduce_exact", &P::dp_reduce_exact,
                 "make the f32 gradient sums of the data-parallel reductions exact (block-exponent int64 fixed "
                 "point, about twice the bytes): the same bits for every dp_reduce algorithm and node grouping, at "
                 "least as accurate as any f32 summation order (host groups and `training.device: cuda`, the "
                 "encoding as device kernels around NCCL's int64 sums; docs/parallelism.md)"),
      make_field("collective_timeout", &P::collective_timeout,
                 "seconds a collective may run before the watchdog names the ranks that never arrived and aborts the "
                 "job (training.device cuda: also each NCCL wait, which aborts its communicator naming op, group and "
                 "rank); 0 = off",
                 {.check = at_least(0)}),
  };
  return table;
}

std::vector<int> ParallelConfig::stage_layers(int n_layer) const {
  const int stages = pp * virtual_stages;
  std::vector<int> layers;
  if (pp_layers.empty()) {
    MYRIAD_CHECK(n_layer % stages == 0, "model.n_layer (" << n_layer << ") must be divisible by parallel.pp (" << pp
                                                          << ") * parallel.virtual_stages (" << virtual_stages
                                                          << ") = " << stages
                                                          << " for an even split; or list the layers per stage in "
                                                             "parallel.pp_layers");
    layers.assign(static_cast<std::size_t>(stages), n_layer / stages);
    return layers;
  }
  MYRIAD_CHECK(static_cast<int>(pp_layers.size()) == stages,
               "parallel.pp_layers has " << pp_layers.size() << " entries; it needs one per pipeline stage: pp (" << pp
                                         << ") * virtual_stages (" << virtual_stages << ") = " << stages);
  int total = 0;
  for (std::size_t g = 0; g < pp_layers.size(); ++g) {
    std::size_t used = 0;
    int count = 0;
    try {
      count = std::stoi(pp_layers[g], &used);
    } catch (const std::exception&) {
      used = 0;
    }
    MYRIAD_CHECK(used == pp_layers[g].size() && !pp_layers[g].empty(),
                 "parallel.pp_layers[" << g << "] = '" << pp_layers[g] << "' is not a whole number of layers");
    MYRIAD_CHECK(count >= 1, "parallel.pp_layers[" << g << "] = " << count << ": every stage needs at least one layer");
    layers.push_back(count);
    total += count;
  }
  MYRIAD_CHECK(total == n_layer, "parallel.pp_layers sums to " << total << " layers but model.n_layer is " << n_layer
                                                               << " (a split must neither drop nor duplicate a layer)");
  return layers;
}

long long ParallelConfig::degree_product() const { return static_cast<long long>(dp) * tp * pp * cp; }

int ParallelConfig::dp_for_world(int world_size) const {
  if (dp != 0) return dp;
  MYRIAD_CHECK(world_size >= 1, "parallel: the world size must be >= 1, got " << world_size);
  const long long model_ranks = static_cast<long long>(tp) * pp * cp;
  MYRIAD_CHECK(model_ranks >= 1 && world_size % model_ranks == 0,
               "parallel.dp is auto (world size / (tp * pp * cp)), but the world size "
                   << world_size << " is not divisible by tp * pp * cp = " << tp << " * " << pp << " * " << cp << " = "
                   << model_ranks << " (launch a multiple of that many processes, or set parallel.dp and the degrees)");
  return static_cast<int>(world_size / model_ranks);
}

void ParallelConfig::validate(int world_size) const {
  validate_fields(*this);
  MYRIAD_CHECK(world_size >= 1, "parallel: the world size must be >= 1, got " << world_size);
  if (dp == 0) {  // auto: check the degree the world gives (dp_for_world names the numbers)
    ParallelConfig settled = *this;
    settled.dp = dp_for_world(world_size);
    return settled.validate(world_size);
  }
  MYRIAD_CHECK(degree_product() == world_size,
               "parallel: dp * tp * pp * cp = " << dp << " * " << tp << " * " << pp << " * " << cp << " = "
                                                << degree_product() << ", but the world size is " << world_size
                                                << " (launch that many processes or change the degrees)");
  MYRIAD_CHECK(dp % ep == 0, "parallel.ep (" << ep << ") must divide parallel.dp (" << dp
                                             << "): the experts are split over groups of ep data-parallel replicas");
  if (pp_schedule == PipelineSchedule::interleaved) {
    MYRIAD_CHECK(virtual_stages >= 2 && pp >= 2,
                 "parallel.pp_schedule interleaved needs parallel.virtual_stages >= 2 and parallel.pp >= 2, got "
                 "virtual_stages "
                     << virtual_stages << " and pp " << pp);
  } else {
    MYRIAD_CHECK(virtual_stages == 1, "parallel.virtual_stages ("
                                          << virtual_stages << ") > 1 needs parallel.pp_schedule interleaved, got "
                                          << choice_name(pp_schedule));
  }
  MYRIAD_CHECK(zero_stage <= 1 || pp == 1,
               "parallel.zero_stage " << zero_stage << " shards gradients, which pipeline parallelism (pp " << pp
                                      << ") accumulates across micro-batches; use zero_stage 0 or 1 with pp > 1");
}

}  // namespace myriad
