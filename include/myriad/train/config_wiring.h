// Config wiring — the resolved RunConfig turned into the options of the components the Engine
// builds: the model's TransformerConfig, AdamW's settings, the LR schedule, DataParallel's
// options and the compute format (the recompute mode and the pipeline schedule are the config's
// own enums, core/step_modes.h). Pure functions of
// the config (no I/O, no communication); a bad value is refused naming its key.
#pragma once

#include <string>

#include "myriad/config/run_config.h"
#include "myriad/parallel/pipeline_schedule.h"
#include "myriad/distributed/process_groups.h"
#include "myriad/nn/transformer_config.h"
#include "myriad/optim/adamw_optimizer.h"
#include "myriad/optim/lr_schedule.h"
#include "myriad/parallel/data_parallel.h"

namespace myriad::train {

nn::TransformerConfig transformer_config(const ModelConfig& model, std::int64_t vocab_size);
// The model section of the resolved YAML: what a checkpoint must match to be loaded.
std::string model_section_yaml(const RunConfig& config);
optim::AdamWConfig adamw_config(const TrainingConfig& training);  // training.no_decay kinds checked
optim::LrSchedule lr_schedule(const TrainingConfig& training);
// parallel.zero_stage / bucket_mb / pp and, at ZeRO 3, the compute format of each gathered unit;
// the groups to sum the gradient norm over are the caller's.
parallel::DataParallelOptions data_parallel_options(const RunConfig& config);
// The rank grid of a job of world_size ranks (parallel.dp auto settled for it).
distributed::GridShape grid_shape(const ParallelConfig& parallel, int world_size);
// parallel.dp_reduce and parallel.ranks_per_node for ProcessGroups.
distributed::ReductionOptions reduction_options(const ParallelConfig& parallel);
// Tokens of one optimizer step's global batch: micro_batch x gradient_accumulation x dp x seq_len.
std::int64_t tokens_per_step(const RunConfig& config);
// training.precision as the format the model computes in (the weights' and activations' copy).
DType compute_format(Precision precision);

}  // namespace myriad::train
