// ShardPlan — which part of every parameter a rank holds, written once as a table.
//
// Model constructors declare each parameter whole (ParameterSpec: name, global shape, kind, init
// and, for a fused parameter, the row segments a split keeps apart) and never read a rank. The
// plan maps parameter-name patterns to a rule; parallelize() turns a spec into this rank's
// registration in the ParameterStore (the ranges it holds, primary, expert, tp_partial) for the
// rank's ShardCoordinate. The first pattern that matches a name decides; a name that no pattern
// matches is an error naming the parameter. A pattern is a glob whose '*' matches any run of
// characters, dots included ("blocks.*.attn.qkv.*").
//
// Rules (Megatron's tensor parallelism and expert parallelism over the layout's groups):
//   replicated          whole on every tp rank; primary (counted in the gradient norm and in
//                       checkpoints) on tp rank 0 only
//   column_parallel     rows (dim 0) in tp blocks — each segment separately, in granules (the
//                       fused qkv: segments q | k | v of whole heads, granule head_dim); the rank's
//                       pieces are held back to back (its q heads, then k, then v)
//   row_parallel        columns (dim 1) in tp blocks
//   vocabulary_parallel rows of the padded vocabulary in tp blocks (embedding, LM head)
//   tp_token_share      whole on every tp rank, but each tp rank's gradient covers only the
//                       sequences it routes (the MoE layer under tp): summed over tp before the
//                       update; primary on tp rank 0
//   expert_local        dim 0 (the experts) in ep blocks; over tp as tp_token_share
// Block of rank r of n over p parts: [n r / p, n (r + 1) / p) (every rule needs p to divide the
// extent in granules; otherwise an error names the parameter, the extent and the degree).
// The pipeline's part of the plan (which blocks a stage holds) is ParallelConfig::stage_layers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "myriad/nn/parameter_store.h"

namespace myriad::nn {

struct ParameterSpec {
  std::string name = {};
  Shape shape = {};  // the whole parameter
  ParamKind kind = ParamKind::weight;
  ParamInit init = ParamInit::normal;
  float init_std = 0.0f;
  std::vector<std::int64_t> row_segments = {};  // column_parallel: sizes of dim 0's segments (empty: one)
  std::int64_t granule = 1;                     // column_parallel: a split never cuts a granule (a head)
  bool stage_copy = false;  // another pipeline stage holds the primary (the tied embedding's head copy)
};

enum class ShardRule { replicated, column_parallel, row_parallel, vocabulary_parallel, tp_token_share, expert_local };

const char* shard_rule_name(ShardRule rule);

// Where a rank sits on the axes that split parameters.
struct ShardCoordinate {
  int tp_rank = 0, tp_size = 1;
  int ep_rank = 0, ep_size = 1;
};

// One rank's part of one parameter.
struct ShardPlacement {
  int dim = -1;                    // the split dimension; -1 = whole
  std::vector<IndexRange> ranges;  // global indices along dim, held back to back
  bool primary = true;
  bool expert = false;
  bool tp_partial = false;
};

class ShardPlan {
 public:
  struct Entry {
    std::string pattern;
    ShardRule rule;
  };
  explicit ShardPlan(std::vector<Entry> entries) : entries_(std::move(entries)) {}

  // The rule of the first pattern matching `name`; throws naming the parameter when none does.
  ShardRule rule_for(const std::string& name) const;
  ShardPlacement place(const ParameterSpec& spec, const ShardCoordinate& at) const;
  const std::vector<Entry>& entries() const { return entries_; }

 private:
  std::vector<Entry> entries_;
};

// The plan of the GPT/LLaMA/MoE model family (GptModel, TransformerBlock, MoeLayer).
// The transformer's plan. With sequence parallelism (`sequence_parallel`) each tp rank normalises
// its own rows, so the norms' weights and biases are tp_token_share: their partial gradients are
// summed over tp once per step with the other tp-partial gradients, not per layer and micro-batch.
const ShardPlan& transformer_shard_plan(bool sequence_parallel = false);

// Registers this rank's part of `spec` in `store`; returns its index.
std::size_t parallelize(const ParameterSpec& spec, const ShardPlan& plan, const ShardCoordinate& at,
                        ParameterStore& store);

bool glob_matches(const std::string& pattern, const std::string& name);

}  // namespace myriad::nn
