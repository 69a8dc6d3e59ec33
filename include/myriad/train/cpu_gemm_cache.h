// The machine's cache of measured CPU GEMM routes (training.cpu_gemm measured): routes timed by one
// run are reused by the next on the same machine and set-up, which then times only shapes the
// cache lacks — so two fresh runs of one model on one machine get the same plan (and compute
// alike), and a run pays for the timing once.
//
// Where: $MYRIAD_CPU_GEMM_CACHE (a folder; "off" disables the cache), else
// $XDG_CACHE_HOME/myriad, else $HOME/.cache/myriad; the file is cpu_gemm/<CRC-32 of the key>.plan,
// whose first line "# myriad CPU GEMM routes for: <key>" names the machine and set-up it holds
// routes for (cpu::gemm_machine_key: CPU model, logical CPUs, OpenMP threads, the libraries and
// their versions, the routes) and the rest is GemmPlan text. A file of another key, or one that
// does not parse, is ignored with the reason (and replaced by the next write); writes merge into
// the file's current routes and replace it atomically (a temporary file renamed over it), so
// concurrent runs lose at most each other's new entries. Deleting the file forces a new timing.
#pragma once

#include <string>

#include "myriad/ops/cpu_gemm_plan.h"

namespace myriad::train {

class CpuGemmCache {
 public:
  // The cache of this process's machine key, located from the environment (above).
  static CpuGemmCache from_environment();
  CpuGemmCache(std::string path, std::string key) : path_(std::move(path)), key_(std::move(key)) {}

  bool enabled() const { return !path_.empty(); }
  const std::string& path() const { return path_; }

  // The routes the file holds for this key; an empty plan when there is no file. `problem` is
  // set (and the plan empty) when a file exists but cannot be used.
  cpu::GemmPlan read(std::string* problem) const;
  // Adds `plan`'s routes to the file (its other shapes kept); "" or what went wrong.
  std::string add(const cpu::GemmPlan& plan) const;

 private:
  std::string path_;  // "" = off
  std::string key_;
};

}  // namespace myriad::train
