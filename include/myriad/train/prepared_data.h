// Data preparation for a run: resolve the corpus, obtain the tokenizer, tokenize into shards.
//
// data.path: "" → the default corpus (the English fortune files installed by scripts/setup.sh
// under /usr/share/games/fortunes, documents separated by "%" lines); a folder holding
// train_*.bin shards is used as is; any other file or folder is tokenized into
// data.cache_dir (default <logging.dir>/data). A cache is reused only when its recorded source
// (path, tokenizer spec, val_fraction) matches; otherwise it is rebuilt. data.tokenizer:
// gpt2:<dir> (GPT-2's encoder.json + vocab.bpe), bpe:<file> (myriad's format), train:<V>
// (train a byte-level BPE of V tokens on the corpus, saved as <cache>/tokenizer.bpe).
#pragma once

#include <memory>
#include <string>

#include <spdlog/logger.h>

#include "myriad/config/run_config.h"
#include "myriad/data/bpe_tokenizer.h"

namespace myriad::train {

inline constexpr const char* kDefaultCorpusDir = "/usr/share/games/fortunes";

struct PreparedData {
  std::string shard_dir;                            // holds train_*.bin and val_*.bin
  std::shared_ptr<data::BpeTokenizer> tokenizer;    // null when only shards were given
  std::int64_t vocab_size = 0;                      // of the shards
};

PreparedData prepare_data(const RunConfig& config, spdlog::logger& log);

}  // namespace myriad::train
