// compose_rank — the composition root of one rank's training state: given a RankState whose
// config, log, groups and (training.device cuda) device runtime are set, it builds the regions
// through which the model crosses the tp / ep / cp groups and the ModelSplit
// (make_model_parallelism), the model on `placement` under the shard plan (initialised from
// training.seed unless `meta` is given: a dry run's backend, whose allocations it labels by
// phase), the serial layout, DataParallel (ZeRO, gradient exchange, AdamW), the compute copy of
// the weights (training.precision) and the fp16 loss scaler. Used by the Engine and its dry run.
#pragma once

#include "myriad/ops/meta_backend.h"
#include "myriad/ops/placement.h"
#include "myriad/train/rank_state.h"

namespace myriad::train {

void compose_rank(RankState& state, ops::Placement placement, ops::MetaBackend* meta);

}  // namespace myriad::train
