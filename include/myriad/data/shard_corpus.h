// Corpus sharding (`myriad-data tokenize`) — corpus files tokenized by several workers (MPI ranks
// x threads) into train/val token shards that are the same bytes whatever the number of workers,
// with a manifest.
//
// The stream: the documents of the input files (list_corpus_files' order; each file's documents
// in order, as document_source.h reads text, JSONL and zstd files, bad input skipped and
// reported), each preceded by the end-of-text token. Held out: every 1/val_fraction-th document
// by its global index (ValSplit::documents, tokenize_corpus.h's rule) or the stream's last
// val_fraction of tokens (ValSplit::tail). Each split is cut into shards of shard_tokens tokens,
// "<output>/<split>_000000.bin" ..., plain or block-compressed (compressed_shard.h).
//
// Work: files go to workers by size (largest first to the least loaded worker; every worker
// computes the same assignment). A worker encodes its files' documents with its OpenMP threads
// (batches of about batch_bytes of text, results kept in order) into temporary files under
// "<output>/.tokenize" (on a file system every worker sees); the workers then exchange each
// file's document and token counts, place every file's tokens in the split streams, and write
// the shards round-robin (shard k by worker k mod P) from the temporary files. Worker 0 writes
// "<output>/manifest.json" (sources, counts, problems, tokenizer and shard checksums) and removes
// the temporary files. Nothing in the output depends on the number of workers or threads.
//
// Memory per worker: about 3 x batch_bytes (a batch of text and its tokens) plus, while writing a
// shard, its tokens (4 x shard_tokens bytes; compressed shards also hold their blocks).
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "myriad/data/compressed_shard.h"
#include "myriad/data/document_source.h"
#include "myriad/data/text_encoding.h"
#include "myriad/data/tokenize_corpus.h"
#include "myriad/data/worker_group.h"

namespace myriad::data {

struct ShardCorpusOptions {
  std::vector<std::string> inputs;      // files or folders, in this order
  std::vector<std::string> extensions;  // folder filter (list_corpus_files); empty = every file
  std::string output_dir;               // created; must not hold shards yet
  SourceOptions source;                 // separator, JSONL text field, document size limit
  double val_fraction = 0.0;
  ValSplit val_split = ValSplit::documents;
  std::int64_t shard_tokens = 100'000'000;
  std::optional<ShardCompression> compression;  // block-compressed shards
  AtRest at_rest;                               // shards and temporary token files encrypted when it holds keys
  std::int64_t batch_bytes = 32 << 20;
  // (text bytes this worker has read, of its files' total bytes), after each batch; may be empty.
  std::function<void(std::int64_t, std::int64_t)> progress;
};

struct ShardInfo {
  std::string path;
  std::int64_t tokens = 0;
  std::int64_t bytes = 0;   // file size
  std::uint32_t crc32 = 0;  // of the whole file
};

struct ShardCorpusSummary {
  InputReport report;  // every worker's, merged (the same on every worker)
  std::int64_t train_documents = 0, val_documents = 0;
  std::int64_t train_tokens = 0, val_tokens = 0;  // including the end-of-text tokens
  std::vector<ShardInfo> train_shards, val_shards;
  std::string manifest_path;
};

// Collective over `workers`; throws (on the worker that failed) naming the file or the option.
ShardCorpusSummary shard_corpus(const ShardCorpusOptions& options, const TextEncoding& encoding, WorkerGroup& workers);

}  // namespace myriad::data
