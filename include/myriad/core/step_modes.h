// Step modes — the enumerations that a run's config names and the layers below it act on.
//
// One enum per concept, below both the config (which may only depend on core) and the layers
// (nn, optim, parallel), so that no layer converts one enum into another: the config's
// training.recompute is the Recompute the model's backward reads, parallel.pp_schedule the
// PipelineSchedule the schedule builder takes, training.schedule the LrScheduleKind of
// optim::LrSchedule. The spellings (ChoiceTraits names) are the YAML ones; enumerators are
// numbered in the order of their names.
#pragma once

#include <array>
#include <string_view>

#include "myriad/core/choice.h"

namespace myriad {

// Activation recompute per block: none keeps every saved tensor; selective drops the tensors
// that are cheap to rebuild without a GEMM (norm outputs, MLP activation) and rebuilds them in
// backward; full keeps only each block's input and re-runs the block's forward in backward.
enum class Recompute { none, selective, full };

// Pipeline schedule (parallel/pipeline_schedule.h): 1F1B, GPipe (all forwards, then all
// backwards) or interleaved 1F1B over virtual stages.
enum class PipelineSchedule { one_f_one_b, gpipe, interleaved };

// Learning-rate decay after warmup (optim/lr_schedule.h).
enum class LrScheduleKind { cosine, linear, constant };

template <>
struct ChoiceTraits<Recompute> {
  static constexpr std::array<std::string_view, 3> names{"none", "selective", "full"};
};
template <>
struct ChoiceTraits<PipelineSchedule> {
  static constexpr std::array<std::string_view, 3> names{"1f1b", "gpipe", "interleaved"};
};
template <>
struct ChoiceTraits<LrScheduleKind> {
  static constexpr std::array<std::string_view, 3> names{"cosine", "linear", "constant"};
};

}  // namespace myriad
