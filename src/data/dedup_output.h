// Internal: dedup's output step (see dedup.h) — each worker rewrites its files' kept documents
// (a JSONL record re-emitted as read, every field intact; a text document as {"text": ...}) and
// lists the documents it removed, each with the kept document it duplicates, in
// "<output>/dedup_removed.jsonl" (corpus order). Collective over the workers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "myriad/data/dedup.h"

namespace myriad::data::detail {

// What the dedup step decided, indexed by global document (corpus order).
struct DedupDecision {
  const std::vector<std::string>& files;
  const std::vector<int>& owner;                   // worker of each file
  const std::vector<std::int64_t>& first;          // global index of each file's first document; back() = total
  const std::vector<bool>& kept;                   // per document
  const std::vector<std::int64_t>& kept_document;  // per document: the kept document of its cluster (itself if kept)
  const std::vector<bool>& exact_copy;             // per document: dropped as an exact copy
};

// Writes the kept documents and the removed list under options.output_dir; returns the list's path.
std::string write_dedup_output(const DedupOptions& options, const DedupDecision& decision, WorkerGroup& workers);

}  // namespace myriad::data::detail
