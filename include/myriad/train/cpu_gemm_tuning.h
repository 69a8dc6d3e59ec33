// training.cpu_gemm measured: the CPU GEMM plan of a run (ops/cpu_gemm_plan.h), measured on the
// shapes its first step ran, agreed on by every rank and kept in its checkpoints.
//
// Sequence: the Engine starts every run with no plan installed (the fixed rule). With `measured`,
// the first step an engine takes (fresh or resumed) records the GEMM shapes it runs (begin_step);
// after it (end_step) each shape takes its route from the run's plan (restored from a checkpoint),
// else from rank 0's machine cache (cpu_gemm_cache.h), else every rank times it on each route it
// has; rank 0 merges the ranks' plans (for a shape several ranks have, the lowest rank's route),
// every rank installs the one merged plan from the step after on (a restored plan's other shapes
// kept), and rank 0 adds it to the cache. A checkpoint records the plan's text; a resume installs
// it before its first step, so a resumed run computes as the uninterrupted one did — on the same
// layout and batch; under another, the shapes the plan lacks are timed after its first step. A plan
// naming a route this process cannot run (oneDNN missing) is not installed: the resumed run
// measures anew, and says so. The research API's steps (research_step.h) record from their
// backward to their optimizer_step alike.
//
// The installed plan belongs to the process (ops/cpu_gemm.h): each engine's begin_step makes it
// that engine's own (none for `fixed`), and so does activate, which the Engine calls before every
// other pass (the research API's forward, evaluate, generate): two engines in one process each
// compute on their own plan. A step that throws abandons its recording (abandon_step).
#pragma once

#include <exception>
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

  void activate();      // this engine's plan in force, nothing recorded (a pass outside step and backward)
  void begin_step();    // activate(); measured and not yet covered: records the step's shapes
  void end_step();      // after a recorded step: routes for its shapes, agreed over the world (collective)
  void abandon_step();  // a step that threw: its recording ends, nothing is measured

  // The installed plan's text ("" = none), for a checkpoint's manifest.
  std::string plan_text() const;
  // A checkpoint's plan (read from `source`), installed when training.cpu_gemm is measured; an
  // empty one (none recorded) uninstalls any plan, so the run measures after its next step. Every
  // rank calls it alike.
  void restore(const cpu::GemmPlan& saved, const std::string& source);

 private:
  void install(std::shared_ptr<const cpu::GemmPlan> plan);
  bool measured() const;

  RankState& state_;
  std::shared_ptr<const cpu::GemmPlan> plan_;
  bool covered_ = false;  // plan_ holds the routes of every shape a step of this engine ran
  std::optional<cpu::GemmShapeRecording> recording_;
};

// Ends `tuning`'s recording (abandon_step) when the scope is left by an exception: a step that
// throws between begin_step and end_step.
struct AbandonGemmRecordingOnThrow {
  CpuGemmTuning* tuning;  // may be null
  int exceptions = std::uncaught_exceptions();
  ~AbandonGemmRecordingOnThrow() {
    if (tuning != nullptr && std::uncaught_exceptions() > exceptions) tuning->abandon_step();
  }
};

}  // namespace myriad::train
