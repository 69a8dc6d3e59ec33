// training.cpu_gemm measured: the CPU GEMM plan of a run (ops/cpu_gemm_plan.h), measured on the
// shapes its first step ran, agreed on by every rank and kept in its checkpoints.
//
// Sequence: the Engine starts every run with no plan installed (the fixed rule). With `measured`,
// the first step a run takes without a plan records the GEMM shapes it runs (begin_step); after it
// (end_step) every rank times its own shapes on each route it has, rank 0 merges the plans (for a
// shape several ranks timed, the lowest rank's choice) and every rank installs the one merged plan
// from the step after on. A checkpoint records the plan's text; a resume installs it before its
// first step, so a resumed run computes as the uninterrupted one did. A plan naming a route this
// process cannot run (oneDNN missing) is not installed: the resumed run measures anew, and says so.
// The installed plan belongs to the process (ops/cpu_gemm.h): of two engines alive in one process,
// the one constructed last starts with none installed.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "myriad/ops/cpu_gemm.h"
#include "myriad/train/rank_state.h"

namespace myriad::train {

class CpuGemmTuning {
 public:
  explicit CpuGemmTuning(RankState& state);  // installs no plan (every run starts on the rule)
  ~CpuGemmTuning();                          // uninstalls the plan it installed
  CpuGemmTuning(const CpuGemmTuning&) = delete;
  CpuGemmTuning& operator=(const CpuGemmTuning&) = delete;

  void begin_step();  // measured, no plan yet: records the step's GEMM shapes
  void end_step();    // after such a step: measures, agrees over the world, installs (collective)

  // The installed plan's text ("" = none), for a checkpoint's manifest.
  std::string plan_text() const;
  // A checkpoint's plan text (from `source`), installed when training.cpu_gemm is measured; ""
  // (none recorded) uninstalls any plan, so the run measures after its next step. Every rank calls
  // it alike.
  void restore(const std::string& text, const std::string& source);

 private:
  void install(std::shared_ptr<const cpu::GemmPlan> plan);

  RankState& state_;
  std::shared_ptr<const cpu::GemmPlan> plan_;
  std::optional<cpu::GemmShapeRecording> recording_;
};

}  // namespace myriad::train
