// The derived-value table: each entry reads one of the sections' helper methods.
#include "myriad/config/derived_values.h"

namespace myriad {

const std::vector<DerivedValue>& derived_values() {
  using I = std::int64_t;
  static const std::vector<DerivedValue> table = {
      {"model.family", "the dense family the blocks follow: architecture, or moe_base for moe",
       [](const RunConfig& c) { return FieldValue(std::string(choice_name(c.model.family()))); }},
      {"model.padded_vocab_size", "vocab_size rounded up to a multiple of 64 (embedding and LM-head rows)",
       [](const RunConfig& c) { return FieldValue(I{c.model.padded_vocab_size()}); }},
      {"model.head_dim", "channels per head, n_embd / n_head",
       [](const RunConfig& c) { return FieldValue(I{c.model.head_dim()}); }},
      {"model.moe_top_k", "experts per token in use (top_k, 2 when 0; 0 on a dense model)",
       [](const RunConfig& c) { return FieldValue(I{c.model.moe_top_k()}); }},
      {"model.expert_ffn", "hidden width of one expert in use (expert_ffn_hidden, or the MLP width)",
       [](const RunConfig& c) { return FieldValue(I{c.model.expert_ffn()}); }},
      {"model.moe_capacity_factor", "capacity factor in use (capacity_factor, 1.25 when auto)",
       [](const RunConfig& c) { return FieldValue(c.model.moe_capacity_factor()); }},
  };
  return table;
}

}  // namespace myriad
