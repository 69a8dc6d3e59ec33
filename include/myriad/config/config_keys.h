// Config keys by path — every key of a RunConfig read and written as "section.key"
// ("training.micro_batch", "model.attention.kind"), by walking the field tables (field.h).
//
// This is the one generic door to the config for code outside C++: the Python binding's
// cfg[key], `key in cfg`, cfg.to_dict() and the `--set` overrides (RunConfig::apply_override)
// all go through it, so no key needs code of its own. Invariants: a read gives the stored value
// (std::monostate for auto; call RunConfig::resolved() first for the values in use); a write
// passes the same per-key checks as a --set override (type, range, choice) and leaves the config
// unchanged when it fails; cross-key checks stay in RunConfig::validate(). An alias names its key
// (training.batch_size is training.global_batch_size). An unknown path throws a myriad::Error that
// names it, the closest key (a likely typo) and the keys of its section.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "myriad/config/field.h"
#include "myriad/config/run_config.h"

namespace myriad {

// The canonical path of every key, section by section in file order, keys in table order.
std::vector<std::string> config_keys();

// "" when `path` names a key (or an alias of one), else why not: "unknown key 'training.stepz'
// (did you mean 'training.steps'?); keys of section 'training': ...", or an unknown section.
std::string config_key_problem(std::string_view path);

// What the key `path` is (its type, allowed values, meaning); throws for an unknown path.
const FieldInfo& config_key_info(std::string_view path);

// The stored value of the key `path`; throws for an unknown path.
FieldValue config_value(const RunConfig& config, std::string_view path);

// Sets the key `path` to `value` after the per-key checks: an integer is accepted for a number
// key, a choice matches without regard to case, std::monostate only for the keys that take auto.
// Throws "<path>: <problem>" otherwise, leaving the config as it was.
void set_config_value(RunConfig& config, std::string_view path, const FieldValue& value);

}  // namespace myriad
