// Corpus tokenization: text files / folders -> documents -> token ids -> train/val shards.
//
// Determinism: the output depends only on the inputs, the options and the encoder, never on the
// thread count. Inputs are taken in the order given; a folder contributes every regular file
// below it (recursively, hidden names starting with '.' skipped, optionally filtered by
// extension) sorted by path. Each file is one document, or, with a separator, the text between
// lines that equal the separator exactly (a trailing '\r' is ignored, so CRLF files work); each
// document keeps its own line endings; empty documents are dropped.
//
// Each split's stream is [eot, doc_0 tokens, eot, doc_1 tokens, ...] (every document is
// preceded by the end-of-text token, as in GPT-2 / llm.c) and is cut into shards
// "<output>/train_000000.bin", ..., "<output>/val_000000.bin", ... of at most shard_tokens tokens.
// The train/val split (f = val_fraction), in one of two deterministic ways:
//   ValSplit::documents (default): documents are numbered 0, 1, ... in corpus order; document i
//     goes to val iff floor((i + 1) * f) > floor(i * f), which puts exactly floor(n * f) of n
//     documents in val, spread evenly through the corpus (f = 0.1: documents 9, 19, 29, ...).
//   ValSplit::tail: the whole corpus is one stream of N tokens; its last floor(f * N) tokens are
//     val (cut at a token, so val may start inside a document). For corpora of one or a few
//     documents, e.g. a single text file, where the document rule would leave val empty.
//     Implemented by writing every token to train shards, then copying the tail into val
//     shards and atomically rewriting the train shard that holds the cut (later ones removed).
//
// Documents are encoded in batches of about batch_bytes of text, in parallel (OpenMP over the
// documents of a batch, results kept in document order), so memory stays bounded.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "myriad/data/at_rest.h"

namespace myriad::data {

using TextEncoder = std::function<std::vector<std::int32_t>(std::string_view)>;  // must be thread-safe

enum class ValSplit { documents, tail };

struct TokenizeOptions {
  std::vector<std::string> inputs;      // files or folders, in this order
  std::string output_dir;               // created if missing; must not hold train_*/val_*.bin shards yet
  std::string separator;                // document separator line ("%" for fortune files); empty: file = document
  std::vector<std::string> extensions;  // e.g. {".txt"}, "" = no extension; empty list: every file in a folder
  double val_fraction = 0.0;            // in [0, 1]
  ValSplit val_split = ValSplit::documents;
  std::int64_t shard_tokens = 100'000'000;  // most tokens per shard, > 0
  std::int64_t batch_bytes = 64 << 20;      // text encoded per parallel batch
  AtRest at_rest;                           // shards written encrypted when it holds keys
  // Called after each encoded batch with (files read so far, total files); may be empty.
  std::function<void(std::int64_t, std::int64_t)> progress;
};

struct TokenizeSummary {
  std::int64_t files = 0;
  std::int64_t documents = 0;      // non-empty documents, train + val
  std::int64_t val_documents = 0;  // ValSplit::tail: 0 (val is a token range, not documents)
  std::int64_t bytes = 0;          // document text bytes encoded
  std::int64_t train_tokens = 0;
  std::int64_t val_tokens = 0;  // both including the eot tokens
  std::vector<std::string> train_shards;
  std::vector<std::string> val_shards;
};

// The files `inputs` expand to (see above); a missing input is an error naming it.
std::vector<std::string> list_corpus_files(const std::vector<std::string>& inputs,
                                           const std::vector<std::string>& extensions);

// Splits one file's text into documents (views into `text`); empty separator: the whole text.
std::vector<std::string_view> split_documents(std::string_view text, const std::string& separator);

// Whether document `index` goes to val under the ValSplit::documents rule.
bool is_val_document(std::int64_t index, double val_fraction);
// "documents" / "tail"; anything else throws naming the allowed values.
ValSplit parse_val_split(std::string_view name);

// Calls visit(document) for every non-empty document of `files`, in order (one file in memory at a time).
void for_each_document(const std::vector<std::string>& files, const std::string& separator,
                       const std::function<void(std::string_view)>& visit);

TokenizeSummary tokenize_corpus(const TokenizeOptions& options, const TextEncoder& encode, std::int32_t eot_id,
                                std::uint32_t vocab_size);

}  // namespace myriad::data
