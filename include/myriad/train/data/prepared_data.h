// Folder train/data/ — the training side of the data pipeline: preparing a run's corpus into
// token shards and its tokenizer (this header; rank 0 prepares, the others wait), prefetching the
// next batch in the background (batch_prefetch.h), and the MPI worker group the data tools
// (tokenize, dedup, shard) run over (communicator_workers.h). The formats themselves live in the
// data layer (include/myriad/data).
//
// Data preparation for a run: resolve the corpus, obtain the tokenizer, tokenize into shards.
//
// data.path: "" → the default corpus (the English fortune files installed by scripts/setup.sh
// under /usr/share/games/fortunes, documents separated by "%" lines); a folder holding
// train_*.bin shards is used as is; any other file or folder is tokenized into
// data.cache_dir (default <logging.dir>/data). A cache is reused only when its recorded source
// (path, tokenizer spec, val_fraction, val_split, and each corpus file's size, mtime and CRC-32)
// matches; otherwise it is rebuilt. data.tokenizer:
// gpt2:<dir> (GPT-2's encoder.json + vocab.bpe), bpe:<file> (myriad's format), train:<V>
// (train a byte-level BPE of V tokens on the corpus, saved as <cache>/tokenizer.bpe). A run that
// resumes (checkpoint.resume) with train:<V> never trains a new vocabulary under its checkpoint:
// it tokenizes with the checkpoint's tokenizer.bpe (checkpoint_tokenizer.h; for a checkpoint that
// predates it, the cache's existing tokenizer.bpe), and the cache key records that tokenizer's
// fingerprint (kept_tokenizer=...), so a later fresh run on the same corpus trains its own.
// data.sources: each source is prepared like data.path, a corpus into <cache>/source_<k>; all must
// share one vocabulary (a train:<V> tokenizer would train one per corpus, so it is refused for a
// source that is not already token shards).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include <spdlog/logger.h>

#include "myriad/config/run_config.h"
#include "myriad/data/bpe_tokenizer.h"

namespace myriad::train {

inline constexpr const char* kDefaultCorpusDir = "/usr/share/games/fortunes";

struct PreparedSource {
  std::string path;  // as given in data.sources
  double weight = 1.0;
  std::string shard_dir;  // its train_*.bin and val_*.bin
};

struct PreparedData {
  std::string shard_dir;                          // holds train_*.bin and val_*.bin (data.sources: the first's)
  std::vector<PreparedSource> sources;            // data.sources, each prepared like data.path
  std::shared_ptr<data::BpeTokenizer> tokenizer;  // null when only shards were given
  std::int64_t vocab_size = 0;                    // of the shards
};

// How a run's ranks use the token cache: rank 0 checks its key against the corpus (reading every
// corpus file for its fingerprint) and builds it when needed; the other ranks, after rank 0, take
// the complete cache rank 0 left without reading the corpus again.
enum class CacheUse { check_and_build, prepared_by_rank0 };

// `at_rest`: the run's keys (a resumed checkpoint's tokenizer may be encrypted).
PreparedData prepare_data(const RunConfig& config, spdlog::logger& log, CacheUse use = CacheUse::check_and_build,
                          const data::AtRest& at_rest = {});

}  // namespace myriad::train
