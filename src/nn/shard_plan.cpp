// ShardPlan: glob matching, the rules' arithmetic and the model family's table (shard_plan.h).
#include "myriad/nn/shard_plan.h"

#include <numeric>

#include "myriad/core/error.h"

namespace myriad::nn {

namespace {

// Block `rank` of `extent` split over `parts` in units of `granule`.
IndexRange block(const ParameterSpec& spec, std::int64_t extent, std::int64_t granule, int parts, int rank,
                 const char* axis) {
  MYRIAD_CHECK(extent % (granule * parts) == 0, "shard plan: parameter '"
                                                    << spec.name << "': " << extent << " rows"
                                                    << (granule > 1 ? " in granules of " + std::to_string(granule) : "")
                                                    << " do not split evenly over " << axis << " " << parts);
  const std::int64_t size = extent / parts;
  return {size * rank, size * (rank + 1)};
}

}  // namespace

const char* shard_rule_name(ShardRule rule) {
  switch (rule) {
    case ShardRule::replicated:
      return "replicated";
    case ShardRule::column_parallel:
      return "column_parallel";
    case ShardRule::row_parallel:
      return "row_parallel";
    case ShardRule::vocabulary_parallel:
      return "vocabulary_parallel";
    case ShardRule::tp_token_share:
      return "tp_token_share";
    case ShardRule::expert_local:
      return "expert_local";
  }
  return "?";
}

bool glob_matches(const std::string& pattern, const std::string& name) {
  // Iterative '*' matching with one backtrack point (the last star seen).
  std::size_t p = 0, n = 0, star = std::string::npos, resume = 0;
  while (n < name.size()) {
    if (p < pattern.size() && pattern[p] == '*') {
      star = p++;
      resume = n;
    } else if (p < pattern.size() && pattern[p] == name[n]) {
      ++p;
      ++n;
    } else if (star != std::string::npos) {
      p = star + 1;
      n = ++resume;
    } else {
      return false;
    }
  }
  while (p < pattern.size() && pattern[p] == '*') ++p;
  return p == pattern.size();
}

ShardRule ShardPlan::rule_for(const std::string& name) const {
  for (const Entry& entry : entries_) {
    if (glob_matches(entry.pattern, name)) return entry.rule;
  }
  MYRIAD_THROW("shard plan: no pattern matches parameter '" << name << "' (add it to the model's shard plan)");
}

ShardPlacement ShardPlan::place(const ParameterSpec& spec, const ShardCoordinate& at) const {
  const ShardRule rule = rule_for(spec.name);
  ShardPlacement out;
  // A split part is the only copy of its elements; a whole one is counted on tp rank 0.
  const bool whole_over_tp =
      rule == ShardRule::replicated || rule == ShardRule::tp_token_share || rule == ShardRule::expert_local;
  out.primary = !spec.stage_copy && (!whole_over_tp || at.tp_rank == 0);
  auto need_dims = [&](std::size_t dims) {
    MYRIAD_CHECK(spec.shape.size() >= dims, "shard plan: parameter '" << spec.name << "' has " << spec.shape.size()
                                                                      << " dimensions; rule " << shard_rule_name(rule)
                                                                      << " splits dimension " << dims - 1);
  };
  switch (rule) {
    case ShardRule::replicated:
      break;
    case ShardRule::vocabulary_parallel:  // the padded vocabulary's rows: column-parallel, one segment
    case ShardRule::column_parallel: {
      need_dims(1);
      std::vector<std::int64_t> segments = spec.row_segments;
      if (segments.empty()) segments.push_back(spec.shape[0]);
      MYRIAD_CHECK(std::accumulate(segments.begin(), segments.end(), std::int64_t{0}) == spec.shape[0],
                   "shard plan: parameter '" << spec.name << "': its row segments do not add up to " << spec.shape[0]);
      out.dim = 0;
      std::int64_t start = 0;
      for (std::int64_t extent : segments) {
        const IndexRange mine = block(spec, extent, spec.granule, at.tp_size, at.tp_rank, "tp");
        out.ranges.push_back({start + mine.begin, start + mine.end});
        start += extent;
      }
      break;
    }
    case ShardRule::row_parallel:
      need_dims(2);
      out.dim = 1;
      out.ranges.push_back(block(spec, spec.shape[1], 1, at.tp_size, at.tp_rank, "tp"));
      break;
    case ShardRule::expert_local:
      need_dims(1);
      out.dim = 0;
      out.ranges.push_back(block(spec, spec.shape[0], 1, at.ep_size, at.ep_rank, "ep"));
      out.expert = true;
      out.tp_partial = at.tp_size > 1;
      break;
    case ShardRule::tp_token_share:
      out.tp_partial = at.tp_size > 1;
      break;
  }
  return out;
}

std::size_t parallelize(const ParameterSpec& spec, const ShardPlan& plan, const ShardCoordinate& at,
                        ParameterStore& store) {
  const ShardPlacement part = plan.place(spec, at);
  const std::size_t index =
      part.dim < 0 ? store.add(spec.name, spec.shape, spec.kind, spec.init, spec.init_std)
                   : store.add_shard(spec.name, spec.shape, part.dim, part.ranges, spec.kind, spec.init, spec.init_std);
  store.set_primary(index, part.primary);
  if (part.expert) store.set_expert(index);
  if (part.tp_partial) store.set_tp_partial(index);
  return index;
}

namespace {

// The transformer's table; `norms`: the rule of the norm weights and biases.
std::vector<ShardPlan::Entry> transformer_entries(ShardRule norms) {
  return {
      {"wte", ShardRule::vocabulary_parallel},
      {"lm_head.weight", ShardRule::vocabulary_parallel},
      {"wpe", ShardRule::replicated},
      {"norm_f.*", norms},
      {"blocks.*.norm*", norms},
      {"blocks.*.attn.qkv.*", ShardRule::column_parallel},
      {"blocks.*.attn.proj.weight", ShardRule::row_parallel},
      {"blocks.*.attn.proj.bias", ShardRule::replicated},
      {"blocks.*.mlp.fc.*", ShardRule::column_parallel},
      {"blocks.*.mlp.gate.*", ShardRule::column_parallel},
      {"blocks.*.mlp.up.*", ShardRule::column_parallel},
      {"blocks.*.mlp.proj.weight", ShardRule::row_parallel},
      {"blocks.*.mlp.down.weight", ShardRule::row_parallel},
      {"blocks.*.mlp.proj.bias", ShardRule::replicated},
      {"blocks.*.moe.experts.*", ShardRule::expert_local},
      {"blocks.*.moe.*", ShardRule::tp_token_share},
  };
}

}  // namespace

const ShardPlan& transformer_shard_plan(bool sequence_parallel) {
  static const ShardPlan plan(transformer_entries(ShardRule::replicated));
  static const ShardPlan sequence_parallel_plan(transformer_entries(ShardRule::tp_token_share));
  return sequence_parallel ? sequence_parallel_plan : plan;
}

}  // namespace myriad::nn
