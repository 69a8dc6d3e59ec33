// Checkpointer — one rank's checkpoints of the training state: sharded saves (now or in the
// background), loads under any layout, and the check that a fresh run does not write into
// another run's checkpoint folder.
//
// Invariants: every call is collective over the job. Each rank that owns a distinct part of the
// state writes that part (writes_checkpoint); the checkpoint appears only once complete. At most
// one background write is in flight; it reads only this object's host snapshot, which the next
// save() refills after waiting for it, and the destructor waits for it. A load changes nothing on
// any rank unless every rank read its part. It owns the writer, the snapshot and the checkpoint
// communicator; it reads and writes the shared RankState (the parameters, AdamW state, loss
// scaler and step counter). Every checkpoint holds the run's tokenizer (checkpoint_tokenizer.h);
// a load refuses a checkpoint trained with another one. `load("auto")` takes the newest intact
// checkpoint: rank 0 verifies every checksum first and passes over damaged ones with a warning.
#pragma once

#include <memory>
#include <string>

#include "myriad/data/bpe_tokenizer.h"
#include "myriad/train/checkpoint/async_checkpoint.h"
#include "myriad/train/checkpoint/checkpoint.h"
#include "myriad/train/cpu_gemm_tuning.h"
#include "myriad/train/rank_state.h"

namespace myriad::train {

class Checkpointer {
 public:
  // Takes the host snapshot once when background saves will reuse it (checkpoint.async with
  // checkpoint.every), and a communicator of its own for background writes. Collective.
  // `tokenizer`: the run's (null when it has none); `cpu_gemm`: the run's GEMM plan, saved and
  // restored with the state (null: none). Both outlive this.
  Checkpointer(RankState& state, const data::BpeTokenizer* tokenizer, CpuGemmTuning* cpu_gemm = nullptr);
  ~Checkpointer();
  Checkpointer(const Checkpointer&) = delete;
  Checkpointer& operator=(const Checkpointer&) = delete;

  // Checkpoint at the current step into checkpoint.dir; returns its path. With `background`, the
  // host snapshot is written in a thread while training continues.
  std::string save(bool background);
  // Waits for the background write (if any); returns its path or rethrows its error.
  std::string wait_for_save();
  // `checkpoint_dir` "auto" = the newest in checkpoint.dir (none: nothing changes).
  void load(const std::string& checkpoint_dir);
  // Throws (on every rank) when a run that did not resume would write into another run's
  // checkpoints. Checked once; nothing after a load.
  void check_fresh_run_folder();

 private:
  // Whether this rank owns a distinct part of the state and writes it in checkpoints: every dp
  // rank at ZeRO >= 1 (its shard), the dp rank 0 of each (tp, pp) part at ZeRO 0 — and with
  // ep > 1 the first holder of each share of the experts (expert-data rank 0), for its experts only.
  bool writes_dense_state();
  bool writes_checkpoint();

  RankState& state_;
  const data::BpeTokenizer* tokenizer_;              // the run's, saved into every checkpoint; may be null
  CpuGemmTuning* cpu_gemm_;                          // the run's CPU GEMM plan; may be null
  CheckpointHeader tokenizer_header_;                // its fingerprint and vocabulary size (empty without one)
  std::unique_ptr<distributed::Communicator> comm_;  // used only by checkpoint writes
  parallel::OwnedState snapshot_;   // host snapshot of the part of the state this rank writes, reused by every save
  AsyncCheckpointWriter writer_;    // after comm_ and snapshot_ (its thread reads them): destroyed first
  bool resumed_ = false;            // load() took a checkpoint
  bool fresh_run_checked_ = false;  // check_fresh_run_folder() ran
};

}  // namespace myriad::train
