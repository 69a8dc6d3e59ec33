// Block-sparse attention telemetry of one step (model.attention.kind: block_sparse): over every
// layer, head and sequence of the global batch, the key blocks the layouts kept per query block,
// the kept share of the blocks dense causal attention would read (density), and — with the per-head
// selection — the mean estimated share of the attention mass the kept past blocks carry
// (nn/block_selection.h). Summed over the dp ranks (sequences), tp ranks (heads) and pp stages
// (layers), so every rank reports the same numbers. Collective over dp, tp and pp.
#pragma once

#include "myriad/distributed/communicator.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/train/metrics/step_metrics.h"

namespace myriad::train {

AttentionMetrics collect_attention_metrics(const nn::GptModel& model, distributed::Communicator& dp,
                                           distributed::Communicator& tp, distributed::Communicator& pp);

}  // namespace myriad::train
