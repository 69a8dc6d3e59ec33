// MoE telemetry of one step: per MoE layer of the whole model, the routing of the global batch —
// tokens per expert (min / mean / max over the experts of routed assignments, before dropping),
// the share of assignments dropped over capacity, the mean load-balancing loss per sequence and
// the mean router z-loss per token. Summed over the data ranks (dp x cp: every replica's
// micro-batches, every cp rank's chunks of them) and the tp ranks (each routes its share of the
// sequences) and gathered over the pipeline stages (each holds some layers), so every rank gets
// all layers. Collective over the data group, tp and pp. Bytes and exposed time of the
// ep axis's all-to-alls are the step's comm_axis_* fields (step_metrics.h).
#pragma once

#include <vector>

#include "myriad/distributed/communicator.h"
#include "myriad/nn/gpt_model.h"
#include "myriad/train/metrics/step_metrics.h"

namespace myriad::train {

std::vector<MoeLayerMetrics> collect_moe_metrics(const nn::GptModel& model, distributed::Communicator& data,
                                                 distributed::Communicator& tp, distributed::Communicator& pp);

}  // namespace myriad::train
