// Folder train/checkpoint/ — everything that writes or reads a run's state on disk: the sharded
// checkpoint format (this header: manifest + per-rank pieces, complete or absent), the folder of
// checkpoints with `latest` and retention (checkpoint_folder.h), reading and resharding
// (checkpoint_reader.h, distributed_checkpoint.h), background saving (async_checkpoint.h), and the
// interchange formats (safetensors.h, interchange.h: Hugging Face export/import). Nothing here
// trains; the Engine calls it with the state it owns.
//
// Sharded checkpoints: a directory per step, complete or absent.
//
// Layout: <dir>/step_<00000042>/ { manifest.json, rank_<R>.bin ... } and <dir>/latest (name of the
// newest complete checkpoint). Each data file holds raw little-endian f32 pieces written by one
// rank; a piece is a box of a global tensor (per dimension [begin, end)) — a tensor-parallel
// shard of a parameter, or the whole tensor. manifest.json (format_version 2): step, the resolved
// config (YAML), the model section compared on load, the layout that wrote it (grid, ZeRO
// stage), the data cursor and RNG state (both functions of (seed, step): batches and sampling
// are deterministic in them), the data files with their sizes, for every tensor its name,
// global shape, dtype and pieces (file, box, byte offset, size, CRC-32), and — when the run had a
// tokenizer — the tokenizer its token ids mean: "tokenizer": {file "tokenizer.bpe" (myriad's BPE
// format, in the checkpoint folder), vocab_size, fingerprint, bytes, CRC-32} (checkpoint_tokenizer.h;
// checkpoints written before it have none and still load), and under training.cpu_gemm measured the
// run's CPU GEMM plan ("cpu_gemm_plan": its text, train/cpu_gemm_tuning.h). No executable content: loading parses
// JSON and reads bounds-checked byte ranges.
//
// Writing (any number of ranks): rank 0 calls begin_checkpoint (a fresh "<dir>/.tmp-step_…",
// stale temporary directories of killed saves removed); each writing rank write_checkpoint_file
// into it (fsynced) and hands the returned piece entries to rank 0; rank 0 writes the tokenizer
// into it (write_checkpoint_tokenizer, before the manifest) and finish_checkpoint:
// manifest, fsync, rename to step_…, `latest` replaced atomically (write + rename), all but the
// newest `keep` removed. A crash at any point leaves the previous checkpoint and `latest` intact.
// save_checkpoint does all three in one process.
//
// At rest (data/at_rest.h): with a key ring every data file, the tokenizer and the manifest are
// encrypted (AES-256-GCM, the manifest's sizes and checksums are of the plaintext); the marker and
// `latest` (no model content) stay clear. Reading takes clear and encrypted checkpoints alike. The
// manifest records each encrypted file's "file_id" (its random nonce): a reader refuses a file
// that is not the one recorded, and for such a bound file the chunks' GCM tags authenticate every
// byte, so the CRC-32s (still written) are not recomputed on read.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "myriad/core/tensor.h"
#include "myriad/data/at_rest.h"
#include "myriad/nn/parameter_store.h"

namespace myriad::train {

inline constexpr int kCheckpointFormatVersion = 2;

// Tensor names of the training state: a parameter's values are stored under its own name,
// AdamW's moments under these prefixes ("adamw.m/blocks.0.attn.qkv.weight").
inline constexpr const char* kAdamMPrefix = "adamw.m/";
inline constexpr const char* kAdamVPrefix = "adamw.v/";
inline constexpr const char* kOuterMomentumPrefix = "local_sgd.outer_momentum/";  // training.sync local
// training.precision fp8: the delayed scales and amax histories (nn/fp8_scaling.h), one f32 vector.
inline constexpr const char* kFp8ScalingTensor = "fp8.scaling";

struct CheckpointPiece {
  std::string tensor;
  Shape global_shape;
  std::vector<nn::IndexRange> box;  // one range per dimension of global_shape
  Tensor data;                      // f32, shape = the box's extents (any strides)
};

// What the manifest records besides the tensors.
struct CheckpointHeader {
  std::int64_t step = 0;
  std::string config_yaml;
  std::string model_yaml;             // the model section alone, compared on load
  std::string layout;                 // e.g. "dp 2 x tp 2 x pp 1, zero_stage 1" (informative)
  std::uint64_t seed = 0;             // the data order / sampling seed (RNG state = (seed, step))
  std::int64_t samples_consumed = 0;  // data cursor: training sequences consumed so far
  std::int64_t optimizer_steps = -1;  // AdamW updates applied (fewer than `step` after skipped steps); -1 = step
  double loss_scale = 0.0;            // fp16 dynamic loss scale (0 = none)
  std::int64_t loss_scale_finite_steps = 0;
  // The run's tokenizer (checkpoint_tokenizer.h): "" = none recorded (the run had no tokenizer, or
  // the checkpoint predates the field). When set, <tmp dir>/tokenizer.bpe must exist at finish.
  std::string tokenizer_fingerprint;
  std::int64_t tokenizer_vocab_size = 0;
  // training.cpu_gemm measured: the run's CPU GEMM plan (ops/cpu_gemm_plan.h text); "" = none.
  std::string cpu_gemm_plan;
};

// The tokenizer file inside a checkpoint folder.
inline constexpr const char* kCheckpointTokenizerFile = "tokenizer.bpe";

// The pieces of every `primary` parameter of `store` held in `flat` (that store's flat layout),
// named prefix + parameter name: one piece per tensor-parallel range, or the whole parameter.
std::vector<CheckpointPiece> parameter_pieces(const nn::ParameterStore& store, const Tensor& flat,
                                              const std::string& prefix);
// The pieces of elements [first, last) of parameter `p`'s local tensor (row-major flat order),
// whose values lie contiguously in `packed` from `packed_offset` on (a ZeRO shard's segment): a
// flat range is cut into boxes (a partial leading row, whole rows, a partial trailing row, and so
// on down the dimensions), each mapped to the global tensor through p's tensor-parallel ranges.
std::vector<CheckpointPiece> segment_pieces(const nn::Parameter& p, std::int64_t first, std::int64_t last,
                                            const Tensor& packed, std::int64_t packed_offset,
                                            const std::string& prefix);

// "<dir>/step_00000042": where the checkpoint of `step` ends up.
std::string checkpoint_path(const std::string& dir, std::int64_t step);
// Rank 0, before any file is written: returns the temporary directory of this save.
std::string begin_checkpoint(const std::string& dir, std::int64_t step);
// Writes `pieces` to <tmp_dir>/<file_name> (fsynced); returns their manifest entries (JSON text).
std::string write_checkpoint_file(const std::string& tmp_dir, const std::string& file_name,
                                  const std::vector<CheckpointPiece>& pieces, const data::AtRest& at_rest);
// Rank 0, after every file is written: `file_entries` = what write_checkpoint_file returned on
// each writing rank. Returns the final directory.
std::string finish_checkpoint(const std::string& dir, const std::string& tmp_dir, const CheckpointHeader& header,
                              const std::vector<std::string>& file_entries, int keep, const data::AtRest& at_rest);
// One process: begin, one file "rank_0.bin", finish.
std::string save_checkpoint(const std::string& dir, const CheckpointHeader& header,
                            const std::vector<CheckpointPiece>& pieces, int keep, const data::AtRest& at_rest);

// The resolved config (YAML) recorded in a checkpoint's manifest.
std::string read_checkpoint_config(const std::string& checkpoint_dir, const data::AtRest& at_rest = {});
// The checkpoint `--resume auto` takes under `dir` ("" when none): find_resume_point().path.
std::string latest_checkpoint(const std::string& dir);

}  // namespace myriad::train
