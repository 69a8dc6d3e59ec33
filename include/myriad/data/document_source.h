// Document sources — the documents of corpus files, streamed in a fixed order from plain text,
// JSONL and zstd-compressed files, with every piece of input that is not used counted and named.
//
// A file's format comes from its name: "*.jsonl" (and "*.json") is JSONL — one JSON object per
// line whose string field `text_field` is the document (blank lines are skipped); anything else is
// text — the whole file is one document, or with `separator`, the text between lines that equal
// it exactly (a trailing '\r' ignored). A further ".zst" / ".zstd" suffix means the same format
// zstd-compressed (any number of frames, as public corpora ship "*.jsonl.zst").
//
// Streaming and memory: files are read through a 1 MiB buffer (decompressed through another) and
// split into lines; at most one document is held, and a document (or JSONL line) longer than
// max_document_bytes is skipped and reported instead of being held. So a reader holds at most
// max_document_bytes + 2 MiB, whatever the file's size.
//
// Input problems never pass silently. Each is counted by kind, and the first few of each kind are
// kept as examples "file:line: what" (or ":byte N" for compressed data):
//   empty_file            the file has no bytes (nothing to read)
//   invalid_utf8          a document (or JSONL line) that is not valid UTF-8: skipped
//   not_json              a JSONL line that does not parse as JSON: skipped
//   missing_field         a JSON line without a string `text_field`: skipped
//   too_long              longer than max_document_bytes: skipped
//   corrupt_compressed    zstd reports corrupt data: the rest of the file is skipped
//   truncated_compressed  the file ends inside a zstd frame: the partial last line is skipped
//   unreadable            the file cannot be opened or read: skipped
// Empty documents (nothing between two separators, an empty "text") are dropped and counted in
// InputReport::empty_documents, not as problems.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace myriad::data {

enum class InputFormat { text, jsonl };

struct FileFormat {
  InputFormat format = InputFormat::text;
  bool zstd = false;
};
FileFormat file_format_of(std::string_view path);

struct SourceOptions {
  std::string separator;            // text files: document separator line; "" = the file is one document
  std::string text_field = "text";  // JSONL: the field holding the document
  std::int64_t max_document_bytes = std::int64_t{64} << 20;
};

enum class InputProblem {
  empty_file,
  invalid_utf8,
  not_json,
  missing_field,
  too_long,
  corrupt_compressed,
  truncated_compressed,
  unreadable,
};
inline constexpr int kInputProblemCount = 8;
const char* input_problem_name(InputProblem problem);

struct InputReport {
  static constexpr std::size_t kExamplesPerKind = 3;

  std::int64_t files = 0;
  std::int64_t documents = 0;        // handed to the caller
  std::int64_t document_bytes = 0;   // their UTF-8 bytes
  std::int64_t input_bytes = 0;      // bytes read from the files (compressed size for .zst)
  std::int64_t empty_documents = 0;  // dropped: nothing to train on
  // zstd frames without a content checksum: their documents are kept unverified (frames with one
  // release nothing until it verifies; a failed or truncated frame drops all of its bytes).
  std::int64_t unchecked_frames = 0;
  std::array<std::int64_t, kInputProblemCount> problems{};
  std::array<std::vector<std::string>, kInputProblemCount> examples{};

  void add(InputProblem problem, std::string where_and_what);
  std::int64_t problem_count() const;  // every kind together
  std::int64_t count(InputProblem problem) const { return problems[static_cast<std::size_t>(problem)]; }
  void merge(const InputReport& other);  // sums; examples of `other` appended up to the limit
  // One line per kind that occurred, with its examples ("invalid_utf8: 2 (a.jsonl:7: byte 12 ...)").
  std::string describe_problems() const;
};

// The first invalid byte of `text` as UTF-8 (overlong forms, surrogates and code points above
// U+10FFFF are invalid), or npos when it is valid.
std::size_t first_invalid_utf8(std::string_view text);

// Calls visit(document) for every accepted document of the file `path`, in order, and records
// what it read and skipped in `report`. Never throws for bad input (it is reported); throws only
// when `visit` does.
void for_each_file_document(const std::string& path, const SourceOptions& options, InputReport& report,
                            const std::function<void(std::string_view)>& visit);
// The same, with each document's line in the file (its first line; 1 for a whole-file document).
void for_each_file_document_at(const std::string& path, const SourceOptions& options, InputReport& report,
                               const std::function<void(std::string_view, std::int64_t)>& visit);

// An accepted document with where it came from: its text, its (first) line, and for JSONL the
// whole record it was read from (the line as in the file, without '\r'; every field intact), so a
// writer can re-emit it; empty for text files.
struct DocumentRecord {
  std::string_view text;
  std::int64_t line = 1;
  std::string_view json;
};
// The same again, with each document's record (the views live until visit returns).
void for_each_file_record(const std::string& path, const SourceOptions& options, InputReport& report,
                          const std::function<void(const DocumentRecord&)>& visit);

}  // namespace myriad::data
