// What a run writes and how: the `checkpoint:`, `logging:`, `sample:` and `security:` sections.
//
// Paths default relative to logging.dir (checkpoint.dir "" = <logging.dir>/checkpoints, filled in
// by RunConfig::resolved()).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "myriad/config/field.h"

namespace myriad {

struct CheckpointConfig {
  static constexpr std::string_view kSection = "checkpoint";
  static constexpr std::string_view kSectionMeaning = "when and where checkpoints are written, and resuming";

  std::string dir;         // checkpoint directory; "" = <logging.dir>/checkpoints
  std::int64_t every = 0;  // steps between checkpoints; 0 = only at the end
  int keep = 3;            // newest checkpoints kept on disk (>= 1)
  std::string resume;      // "" = fresh start, "auto" = latest checkpoint in dir if any, else a checkpoint path
  bool async = true;       // periodic saves: snapshot to host memory, write in a background thread

  void validate() const;  // per-key checks
  static const std::vector<Field<CheckpointConfig>>& fields();
  bool operator==(const CheckpointConfig&) const = default;
};

struct LoggingConfig {
  static constexpr std::string_view kSection = "logging";
  static constexpr std::string_view kSectionMeaning = "run directory, metrics and log verbosity";

  std::string dir = "runs/default";   // run directory: logs, metrics, resolved config (and defaults of other dirs)
  std::int64_t every = 10;            // steps between metric lines (>= 1)
  std::string level = "info";         // spdlog level: trace | debug | info | warn | error | critical | off
  bool jsonl = true;                  // rank 0 appends every step's metrics to <dir>/metrics.jsonl
  bool tensorboard = true;            // rank 0 writes TensorBoard event files under <dir>/tensorboard
  bool measure_peak = true;           // measure this rank's peak FLOP/s at start-up (short GEMM) for MFU
  double peak_tflops = 0.0;           // datasheet peak per rank (TFLOP/s) for MFU; 0 = estimate from the CPU
  std::int64_t straggler_every = 10;  // steps between straggler checks (one small all-gather); 0 = off
  double straggler_margin = 0.5;      // report ranks slower than the median compute time by more than this fraction

  void validate() const;  // per-key checks
  static const std::vector<Field<LoggingConfig>>& fields();
  bool operator==(const LoggingConfig&) const = default;
};

struct SampleConfig {
  static constexpr std::string_view kSection = "sample";
  static constexpr std::string_view kSectionMeaning = "text generated from the trained model";

  int tokens = 200;          // tokens to generate; 0 = no sample
  double temperature = 0.8;  // softmax temperature (> 0)
  int top_k = 40;            // sample among the k most likely tokens; 0 = the whole vocabulary
  std::string prompt;        // text the sample continues; "" = start from the end-of-text token

  void validate() const;  // per-key checks
  static const std::vector<Field<SampleConfig>>& fields();
  bool operator==(const SampleConfig&) const = default;
};

struct SecurityConfig {
  static constexpr std::string_view kSection = "security";
  static constexpr std::string_view kSectionMeaning = "encryption at rest and file permissions of what the run writes";

  // Key file (data/at_rest.h): checkpoints (data, tokenizer, manifest) are written encrypted
  // under its current key; "" = the file $MYRIAD_KEY_FILE names, or clear when it is unset.
  std::string key_file;
  // The process umask the training driver sets before it writes anything (octal): "077" = files
  // 0600 and folders 0700, the run's owner only; "022" = readable by all.
  std::string umask = "077";
  // The run's token cache (shards, temporary token files, trained tokenizer) written encrypted
  // under the key file's current key; needs a key (the Engine refuses the run without one).
  bool encrypt_token_shards = false;

  void validate() const;  // per-key checks
  // umask as a number (validate() first).
  unsigned umask_bits() const;
  static const std::vector<Field<SecurityConfig>>& fields();
  bool operator==(const SecurityConfig&) const = default;
};

}  // namespace myriad
