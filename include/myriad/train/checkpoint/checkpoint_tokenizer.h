// The tokenizer a checkpoint was trained with: its token ids are what the checkpoint's embeddings
// and head mean, so a run that resumes it must tokenize with exactly that tokenizer.
//
// Every checkpoint of a run that has a tokenizer holds it as <checkpoint>/tokenizer.bpe (myriad's
// BPE format, written into the temporary directory before the manifest, so a checkpoint is still
// complete or absent) and records its vocabulary size and fingerprint in the manifest
// (checkpoint.h). On load the fingerprint is compared with the run's tokenizer: a difference is
// refused before any state changes (tokenizer_mismatch). Data preparation of a resuming run with
// a trained tokenizer (data.tokenizer train:<V>) tokenizes with the resumed checkpoint's
// tokenizer instead of training a new one (resume_tokenizer_file, train/data/prepared_data.h).
// Checkpoints written before this have no tokenizer: they load, and the log says their ids
// could not be checked.
#pragma once

#include <string>

#include "myriad/config/run_config.h"
#include "myriad/data/bpe_tokenizer.h"
#include "myriad/train/checkpoint/checkpoint.h"

namespace myriad::train {

// "fnv1a64:<16 hex digits>" over the vocabulary (every token's bytes in id order), the merges in
// rank order and the end-of-text id: equal exactly when two tokenizers map every text to the
// same ids.
std::string tokenizer_fingerprint(const data::BpeTokenizer& tokenizer);

// Writes `tokenizer` as <tmp_dir>/tokenizer.bpe and records it in `header` (fingerprint,
// vocabulary size) for finish_checkpoint.
void write_checkpoint_tokenizer(const std::string& tmp_dir, const data::BpeTokenizer& tokenizer,
                                const data::AtRest& at_rest, CheckpointHeader& header);

// "" when a run whose tokenizer is `run_tokenizer` (null: the run has none, e.g. token shards
// given directly) may load the checkpoint at `checkpoint_dir` whose header is `header`; else the
// refusal: both vocabularies and fingerprints, the likely cause and the fix
// (--set data.tokenizer=bpe:<checkpoint>/tokenizer.bpe).
std::string tokenizer_mismatch(const std::string& checkpoint_dir, const CheckpointHeader& header,
                               const data::BpeTokenizer* run_tokenizer, const std::string& tokenizer_spec);

// The checkpoint a run with checkpoint.resume set will continue from as far as the folder says
// without reading the data ("auto": what `latest` names, else the newest complete one; a path:
// itself); "" when the run does not resume or the folder holds none.
std::string resume_checkpoint_dir(const RunConfig& config);

}  // namespace myriad::train
