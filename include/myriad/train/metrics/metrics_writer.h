// MetricsWriter — the files a run's metrics go to (rank 0 only; docs/metrics.md).
//
// <dir>/metrics.jsonl: one JSON object per line, appended (a resumed run continues the file):
// {"kind": "train", ...every StepMetrics field...} per step and {"kind": "eval", ...} per
// evaluation. <dir>/tensorboard/events.out.tfevents.*: the same as TensorBoard scalars (train/,
// perf/, comm/, memory/, val/ tags). Lines are flushed every step so a crash loses nothing.
#pragma once

#include <fstream>
#include <memory>
#include <string>

#include "myriad/train/metrics/step_metrics.h"
#include "myriad/train/metrics/tensorboard_writer.h"

namespace myriad::train {

class MetricsWriter {
 public:
  MetricsWriter(const std::string& dir, bool jsonl, bool tensorboard);

  void write(const StepMetrics& m);
  void write_eval(std::int64_t step, double val_loss);
  std::string jsonl_path() const { return jsonl_path_; }

 private:
  std::string jsonl_path_;
  std::ofstream jsonl_;
  std::unique_ptr<TensorBoardWriter> tensorboard_;
};

}  // namespace myriad::train
