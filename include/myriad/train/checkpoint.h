// Single-process checkpoints: a directory per step, complete or absent.
//
// Layout: <dir>/step_<00000042>/ { manifest.json, state.bin } and <dir>/latest (name of the
// newest complete checkpoint). manifest.json: format_version, step, the resolved config (YAML
// text), and for every tensor its name, shape, dtype, byte offset and size inside state.bin and
// the CRC-32 of its bytes. state.bin: raw little-endian f32 tensors (model parameters, then
// AdamW m and v, flat). Saving writes everything into "<dir>/.tmp-step_…", fsyncs, renames it,
// then replaces `latest` atomically (write + rename) and deletes all but the newest `keep`.
// Loading checks the version, every tensor's presence, shape, size and checksum, and the
// model section of the config, before it touches the destination: nothing is half-loaded.
// The data cursor and RNG state are the step (data order and sampling are functions of
// (seed, step, index)), so step + tensors resume bit-identically.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "myriad/core/tensor.h"

namespace myriad::train {

inline constexpr int kCheckpointFormatVersion = 1;

struct CheckpointTensor {
  std::string name;
  Tensor tensor;  // contiguous f32 CPU tensor (saved from / loaded into)
};

struct CheckpointContents {
  std::int64_t step = 0;
  std::string config_yaml;
  std::string model_yaml;  // the model section alone, compared on load
  std::vector<CheckpointTensor> tensors;
};

// The training state of a run: the flat parameter buffer and AdamW's m and v in the same flat
// layout, under these names (the format's contract; `model_yaml` is what a load must match).
inline constexpr const char* kParametersTensor = "model.parameters";
inline constexpr const char* kAdamMTensor = "optimizer.adamw.m";
inline constexpr const char* kAdamVTensor = "optimizer.adamw.v";
CheckpointContents training_state(std::int64_t step, std::string config_yaml, std::string model_yaml, Tensor values,
                                  Tensor m, Tensor v);

// Writes the checkpoint of `contents.step` under `dir`; returns its directory.
std::string save_checkpoint(const std::string& dir, const CheckpointContents& contents, int keep);
// "<dir>/step_00000042": where save_checkpoint puts the checkpoint of `step`.
std::string checkpoint_path(const std::string& dir, std::int64_t step);
// The resolved config (YAML) recorded in a checkpoint's manifest.
std::string read_checkpoint_config(const std::string& checkpoint_dir);
// Newest complete checkpoint directory under `dir` ("" when none).
std::string latest_checkpoint(const std::string& dir);
// Reads `checkpoint_dir` into contents.tensors (names must match, shapes must match) and sets
// contents.step; throws naming the file and tensor on any mismatch, before modifying anything.
void load_checkpoint(const std::string& checkpoint_dir, CheckpointContents& contents);

}  // namespace myriad::train
