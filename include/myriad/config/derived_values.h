// Derived values — what a run uses that no key holds, computed from the keys by the sections'
// helper methods (ModelConfig::padded_vocab_size(), head_dim(), family(), ...).
//
// One table, so tools outside C++ (the Python planner, the Hugging Face export) read the
// engine's own arithmetic through the bindings (Config.derived()) instead of repeating it.
// Keys that are derived when left at 0 / auto (model.ffn_hidden, training.seq_len, ...) are not
// here: RunConfig::resolved() fills them in. Each entry is named "section.name" and its value is
// a FieldValue of a plain type (never auto).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "myriad/config/field.h"
#include "myriad/config/run_config.h"

namespace myriad {

struct DerivedValue {
  std::string path;     // "model.padded_vocab_size"
  std::string meaning;  // one line
  std::function<FieldValue(const RunConfig&)> get;
};

// Every derived value, in a fixed order.
const std::vector<DerivedValue>& derived_values();

}  // namespace myriad
