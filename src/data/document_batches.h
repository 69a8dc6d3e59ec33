// Internal: a file's documents in batches of about `batch_bytes` of text (the data tools encode
// or sign a batch with their OpenMP threads, results kept in order). visit(texts, lines) gets
// every accepted document of the batch and its first line; `on_batch_done(bytes)` reports the
// batch's text bytes (for progress). Memory: one batch of text.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <string>
#include <vector>

#include "myriad/data/document_source.h"

namespace myriad::data::detail {

using DocumentBatchVisitor =
    std::function<void(const std::deque<std::string>& texts, const std::vector<std::int64_t>& lines)>;

inline void for_each_document_batch(const std::string& path, const SourceOptions& source, InputReport& report,
                                    std::int64_t batch_bytes, const DocumentBatchVisitor& visit,
                                    const std::function<void(std::int64_t)>& on_batch_done) {
  std::deque<std::string> texts;  // a deque: elements never move while the batch grows
  std::vector<std::int64_t> lines;
  std::int64_t bytes = 0;
  auto flush = [&] {
    if (!texts.empty()) visit(texts, lines);
    on_batch_done(bytes);
    texts.clear();
    lines.clear();
    bytes = 0;
  };
  for_each_file_document_at(path, source, report, [&](std::string_view text, std::int64_t line) {
    texts.emplace_back(text);
    lines.push_back(line);
    bytes += static_cast<std::int64_t>(text.size());
    if (bytes >= batch_bytes) flush();
  });
  flush();
}

}  // namespace myriad::data::detail
