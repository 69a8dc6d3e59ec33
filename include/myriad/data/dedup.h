// Near-duplicate removal (`myriad-data dedup`) over workers (MPI ranks x threads).
//
// Documents (document_source.h, in list_corpus_files order; global index = corpus order) are
// compared two ways:
//   exact duplicates   equal 128-bit content hashes;
//   near duplicates    MinHash signatures (minhash.h) whose LSH bands collide, verified by the
//                      signatures' estimated Jaccard >= threshold.
// Clusters are the connected components of the verified pairs (union-find); the document kept
// from each cluster is the first in corpus order, every other one is dropped.
//
// Work: files go to workers by size (as for tokenize); a worker reads its files, hashing and
// signing their documents with its OpenMP threads. Content hashes and band keys are sent to the
// worker that owns them (key mod P, one all-to-all each); an owner sorts its keys and pairs every
// member of a group with the group's first document (a star: k - 1 pairs for k members, not
// k(k-1)/2, so repeated boilerplate cannot explode). Candidate pairs travel to the owner of their
// first document, which attaches its signature, then to the owner of the second, which verifies
// them. Every worker gathers all verified pairs and runs the same union-find. So the result does
// not depend on the number of workers or threads.
// Output (optional): the kept documents of each input file, in order, in
// "<output>/<file index, 6 digits>_<file name>.jsonl" — a JSONL input's records as read (every
// field, `id` and all, kept; the text stays in its field), a text input's documents as
// {"text": ...}; "<output>/dedup_removed.jsonl", one line per removed document in corpus order:
//   {"removed": "file:line", "removed_id": ..., "duplicate_of": "file:line", "duplicate_of_id": ...,
//    "kind": "exact" | "near"}
// (the ids only where the JSON record has a non-null "id"; duplicate_of is the kept document of
// the cluster); and "<output>/dedup_report.json".
// Memory per worker: 4 x num_perm + 48 bytes per document of its files (2 KiB with the default
// 512 permutations), plus the pairs; with an output, about 100 bytes more per removed document.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "myriad/data/document_source.h"
#include "myriad/data/minhash.h"
#include "myriad/data/worker_group.h"

namespace myriad::data {

struct DedupOptions {
  std::vector<std::string> inputs;
  std::vector<std::string> extensions;
  SourceOptions source;
  MinHashOptions minhash;
  double threshold = 0.8;  // estimated Jaccard a candidate pair needs
  std::string output_dir;  // "" = report only
  int examples = 5;        // near-duplicate pairs quoted in the report
  std::int64_t batch_bytes = 32 << 20;
  std::function<void(std::int64_t, std::int64_t)> progress;  // (bytes read, of this worker's files)
};

struct DuplicatePair {
  std::string kept, dropped;  // "file:line"
  double jaccard = 0.0;       // estimated
};

struct DedupSummary {
  InputReport report;  // merged over the workers
  std::int64_t documents_in = 0, documents_out = 0;
  std::int64_t exact_duplicates = 0;  // dropped as a copy of an earlier document
  std::int64_t near_duplicates = 0;   // dropped otherwise
  std::int64_t clusters = 0;          // clusters of two or more documents
  std::int64_t candidate_pairs = 0;   // distinct pairs from colliding bands
  std::int64_t verified_pairs = 0;    // of them, estimated Jaccard >= threshold
  std::vector<DuplicatePair> examples;
  std::vector<bool> kept;  // by global document index
  std::string report_path;
  std::string removed_path;  // the removed list (with an output only)
};

// Collective over `workers`.
DedupSummary dedup_corpus(const DedupOptions& options, WorkerGroup& workers);

}  // namespace myriad::data
