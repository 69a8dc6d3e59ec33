// Moving models in and out of myriad: checkpoint <-> one safetensors file of full tensors.
//
// export: the parameters of a checkpoint directory, one tensor per parameter under myriad's names
// ("wte", "wpe", "blocks.0.qkv.weight", ..., shapes as the model holds them: the embedding
// padded to the padded vocabulary), into `output` (.safetensors) with the run's resolved config in
// the metadata and, made portable, beside it (`output` with the extension .yaml): model, data and
// optimisation as the source run had them, but logging.dir runs/<output's stem> (so training from
// it never writes into the source run's checkpoints) and the data-parallel layout left to the
// launch (parallel.dp auto, accumulation derived from the global batch).
// import: a safetensors file with exactly those names and shapes (as an export writes) plus a
// run config -> a step-0 checkpoint (fresh AdamW state) under `checkpoint_root`, loadable with
// `--resume <path>`. Missing, extra or mis-shaped tensors are errors naming them; nothing is
// written then.
#pragma once

#include <string>

#include "myriad/data/at_rest.h"

namespace myriad::train {

// Files are read and written through `at_rest` (data/at_rest.h): with keys, the export and the
// imported checkpoint are encrypted (the config written beside an export holds no weights).
// Returns the path of the config written beside the output.
std::string export_safetensors(const std::string& checkpoint_dir, const std::string& output,
                               const data::AtRest& at_rest = {});
// Returns the checkpoint directory written.
std::string import_safetensors(const std::string& input, const std::string& config_yaml_path,
                               const std::string& checkpoint_root, const data::AtRest& at_rest = {});

}  // namespace myriad::train
