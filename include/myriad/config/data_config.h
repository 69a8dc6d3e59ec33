// DataConfig — the `data:` section: the corpus, the tokenizer and where token shards are cached.
//
// Empty strings mean "derived": path "" is the default corpus (resolved by the driver), tokenizer
// "" trains a byte-level BPE with model.vocab_size tokens, cache_dir "" is <logging.dir>/data
// (see RunConfig::resolved()).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "myriad/config/field.h"

namespace myriad {

struct DataConfig {
  static constexpr std::string_view kSection = "data";
  static constexpr std::string_view kSectionMeaning = "corpus, tokenizer and token-shard cache";

  std::string path;                // text file, folder of text files, or folder of token shards; "" = default corpus
  std::string tokenizer;           // gpt2:<dir with encoder.json + vocab.bpe> | bpe:<file> | train:<vocab size>; "" =
                                   // train:<model.vocab_size>
  double val_fraction = 0.05;      // share of the corpus held out for validation, in (0, 0.5]
  std::string val_split = "auto";  // documents | tail | auto (tail for one undivided file, else documents)
  std::string cache_dir;           // token shards are written here; "" = <logging.dir>/data
  // A mixture instead of one corpus: each member "path" or "path@weight" (YAML also takes
  // {path: ..., weight: ...} maps); every path a corpus or a folder of token shards. Empty = data.path.
  std::vector<std::string> sources;

  // Per-key checks (the tokenizer's form, val_fraction's range, the sources' weights).
  void validate() const;

  struct Source {
    std::string path;
    double weight = 1.0;
  };
  // data.sources parsed (throws naming the member that is not "path" or "path@weight > 0").
  std::vector<Source> source_list() const;

  static const std::vector<Field<DataConfig>>& fields();
  bool operator==(const DataConfig&) const = default;
};

// The parts of a tokenizer spec "kind:argument" (kind gpt2, bpe or train); throws myriad::Error
// naming the allowed forms when `spec` is not one of them. For train, argument is the vocab size.
struct TokenizerSpec {
  std::string kind;
  std::string argument;
};
TokenizerSpec parse_tokenizer_spec(std::string_view spec);

}  // namespace myriad
