// Document sources: files -> byte chunks (plain or zstd) -> lines -> documents, with every
// skipped piece reported (see document_source.h).
#include "myriad/data/document_source.h"
#include "zstd_handles.h"

#include "myriad/core/error.h"

#include <zstd.h>

#include <cstdio>
#include <memory>
#include <nlohmann/json.hpp>
#include <sstream>

namespace myriad::data {

namespace {

constexpr std::size_t kReadBytes = std::size_t{1} << 20;

bool ends_with(std::string_view text, std::string_view suffix) {
  return text.size() >= suffix.size() && text.substr(text.size() - suffix.size()) == suffix;
}

std::string where(const std::string& path, std::int64_t line) { return path + ":" + std::to_string(line); }

struct FileCloser {
  void operator()(std::FILE* file) const { std::fclose(file); }
};
// The file's bytes in chunks, decompressed when it is zstd. next() returns an empty view at the
// end, or after a problem it has reported (corrupt or truncated data, a read error).
// zstd: a frame's decompressed bytes are held back until the frame ends — when zstd has verified
// its content checksum, if it has one — and only then handed out, so a bit flip or a cut inside a
// frame drops the whole frame, never half of it (nothing decoded before the failure reaches the
// caller). A frame larger than kFrameMemoryBytes is held in an unnamed temporary file. A frame
// without a checksum is handed out unverified and counted (InputReport::unchecked_frames).
class ByteStream {
 public:
  static constexpr std::size_t kFrameMemoryBytes = std::size_t{64} << 20;

  ByteStream(const std::string& path, bool zstd, InputReport& report)
      : path_(path), report_(report), file_(std::fopen(path.c_str(), "rb")), input_(kReadBytes) {
    if (!file_) {
      report_.add(InputProblem::unreadable, path + ": cannot open");
      done_ = true;
      return;
    }
    if (zstd) {
      context_.reset(ZSTD_createDCtx());
      output_.resize(ZSTD_DStreamOutSize());
    }
  }

  bool truncated() const { return truncated_; }

  std::string_view next() {
    if (done_) return {};
    if (!context_) {
      const std::size_t got = read_more();
      return std::string_view(input_.data(), got);
    }
    if (const std::string_view released = release(); !released.empty()) return released;
    for (;;) {
      if (in_.pos == in_.size && !output_full_) {
        const std::size_t got = read_more();
        if (got == 0) {
          if (!done_ && frame_open_) {
            truncated_ = true;
            report_.add(InputProblem::truncated_compressed,
                        path_ + ": byte " + std::to_string(consumed_) + ": the file ends inside a zstd frame (its " +
                            std::to_string(held_bytes()) + " decompressed bytes dropped)");
          }
          done_ = true;
          return {};
        }
        in_ = ZSTD_inBuffer{input_.data(), got, 0};
      }
      if (!frame_open_ && in_.pos < in_.size) note_frame_header();
      ZSTD_outBuffer out{output_.data(), output_.size(), 0};
      const std::size_t before = in_.pos;
      const std::size_t result = ZSTD_decompressStream(context_.get(), &out, &in_);
      consumed_ += static_cast<std::int64_t>(in_.pos - before);
      if (ZSTD_isError(result)) {
        report_.add(InputProblem::corrupt_compressed, path_ + ": byte " + std::to_string(consumed_) + ": " +
                                                          ZSTD_getErrorName(result) + " (the frame's " +
                                                          std::to_string(held_bytes() + out.pos) +
                                                          " decompressed bytes dropped, rest of the file skipped)");
        truncated_ = true;  // the text stops mid-stream: a partial last line or document is not whole
        done_ = true;
        return {};
      }
      hold(std::string_view(output_.data(), out.pos));
      frame_open_ = result != 0;
      output_full_ = out.pos == out.size;
      if (!frame_open_ && (held_.size() > 0 || spill_)) {  // the frame ended and verified: release it
        if (!frame_checked_) ++report_.unchecked_frames;
        if (const std::string_view released = begin_release(); !released.empty()) return released;
      }
    }
  }

 private:
  struct SpillCloser {
    void operator()(std::FILE* file) const { std::fclose(file); }
  };

  // Reads the next frame's header to learn whether it carries a checksum: a zstd frame starts with
  // the magic 0xFD2FB528 (little endian) and its descriptor byte's bit 2 is the content-checksum
  // flag (RFC 8878, 3.1.1.1.1). Skippable frames and headers not yet whole in the buffer count as
  // checked (zstd still verifies whatever the frame declares).
  void note_frame_header() {
    const auto* bytes = static_cast<const unsigned char*>(in_.src) + in_.pos;
    const std::size_t available = in_.size - in_.pos;
    const bool zstd_frame =
        available >= 5 && bytes[0] == 0x28 && bytes[1] == 0xB5 && bytes[2] == 0x2F && bytes[3] == 0xFD;
    frame_checked_ = !zstd_frame || (bytes[4] & 0x04) != 0;
  }

  std::int64_t held_bytes() const { return static_cast<std::int64_t>(held_.size()) + spilled_; }

  void hold(std::string_view bytes) {
    if (bytes.empty()) return;
    if (!spill_ && held_.size() + bytes.size() > kFrameMemoryBytes) {
      spill_.reset(std::tmpfile());
      MYRIAD_CHECK(spill_, path_ << ": a zstd frame above " << (kFrameMemoryBytes >> 20)
                                 << " MiB needs a temporary file to be held until it verifies, and none could be "
                                    "created (TMPDIR)");
      write_spill(held_);
      held_.clear();
    }
    if (spill_) {
      write_spill(bytes);
    } else {
      held_.append(bytes);
    }
  }

  void write_spill(std::string_view bytes) {
    MYRIAD_CHECK(std::fwrite(bytes.data(), 1, bytes.size(), spill_.get()) == bytes.size(),
                 path_ << ": writing a zstd frame to a temporary file failed (disk full?)");
    spilled_ += static_cast<std::int64_t>(bytes.size());
  }

  // The verified frame, handed out: from memory in one piece, or from the temporary file in chunks.
  std::string_view begin_release() {
    releasing_ = true;
    if (spill_) std::rewind(spill_.get());
    return release();
  }

  std::string_view release() {
    if (!releasing_) return {};
    if (!spill_) {
      releasing_ = false;
      ready_.swap(held_);
      held_.clear();
      return ready_;
    }
    ready_.resize(kReadBytes);
    const std::size_t got = std::fread(ready_.data(), 1, ready_.size(), spill_.get());
    if (got > 0) return std::string_view(ready_.data(), got);
    releasing_ = false;
    spill_.reset();
    spilled_ = 0;
    return {};
  }

  std::size_t read_more() {
    const std::size_t got = std::fread(input_.data(), 1, input_.size(), file_.get());
    report_.input_bytes += static_cast<std::int64_t>(got);
    if (got == 0) {
      if (std::ferror(file_.get())) report_.add(InputProblem::unreadable, path_ + ": read error");
      if (!context_) done_ = true;
    }
    return got;
  }

  const std::string& path_;
  InputReport& report_;
  std::unique_ptr<std::FILE, FileCloser> file_;
  std::unique_ptr<ZSTD_DCtx, DctxFreer> context_;
  std::vector<char> input_, output_;
  ZSTD_inBuffer in_{nullptr, 0, 0};
  std::int64_t consumed_ = 0;  // compressed bytes fed to zstd
  bool frame_open_ = false, output_full_ = false, done_ = false, truncated_ = false;
  bool frame_checked_ = true;                      // the current frame declares a content checksum
  std::string held_;                               // the current frame's bytes so far (in memory)
  std::unique_ptr<std::FILE, SpillCloser> spill_;  // ... or in a temporary file past kFrameMemoryBytes
  std::int64_t spilled_ = 0;
  bool releasing_ = false;  // handing out a verified frame
  std::string ready_;       // the bytes last handed out
};

// Splits a ByteStream into lines (without '\n'), calling line(text, number) for each; a line
// longer than `limit` is passed as too_long(number) instead. The last line may lack its '\n';
// it is dropped when the stream was truncated.
void for_each_line(ByteStream& stream, std::int64_t limit,
                   const std::function<void(std::string_view, std::int64_t)>& line,
                   const std::function<void(std::int64_t)>& too_long) {
  std::string partial;
  bool overlong = false;
  std::int64_t number = 1;
  for (std::string_view chunk = stream.next(); !chunk.empty(); chunk = stream.next()) {
    while (!chunk.empty()) {
      const std::size_t newline = chunk.find('\n');
      const std::string_view piece = chunk.substr(0, newline);
      if (!overlong && static_cast<std::int64_t>(partial.size() + piece.size()) > limit) {
        overlong = true;
        partial.clear();
      }
      if (!overlong) partial.append(piece);
      if (newline == std::string_view::npos) break;
      if (overlong) {
        too_long(number);
      } else {
        line(partial, number);
      }
      partial.clear();
      overlong = false;
      ++number;
      chunk.remove_prefix(newline + 1);
    }
  }
  if (stream.truncated()) return;
  if (overlong) {
    too_long(number);
  } else if (!partial.empty()) {
    line(partial, number);
  }
}

std::string_view without_cr(std::string_view line) {
  return !line.empty() && line.back() == '\r' ? line.substr(0, line.size() - 1) : line;
}

bool blank(std::string_view line) { return line.find_first_not_of(" \t\r") == std::string_view::npos; }

}  // namespace

FileFormat file_format_of(std::string_view path) {
  FileFormat format;
  for (std::string_view suffix : {".zst", ".zstd"}) {
    if (ends_with(path, suffix)) {
      format.zstd = true;
      path.remove_suffix(suffix.size());
      break;
    }
  }
  if (ends_with(path, ".jsonl") || ends_with(path, ".json")) format.format = InputFormat::jsonl;
  return format;
}

const char* input_problem_name(InputProblem problem) {
  switch (problem) {
    case InputProblem::empty_file:
      return "empty_file";
    case InputProblem::invalid_utf8:
      return "invalid_utf8";
    case InputProblem::not_json:
      return "not_json";
    case InputProblem::missing_field:
      return "missing_field";
    case InputProblem::too_long:
      return "too_long";
    case InputProblem::corrupt_compressed:
      return "corrupt_compressed";
    case InputProblem::truncated_compressed:
      return "truncated_compressed";
    case InputProblem::unreadable:
      return "unreadable";
  }
  return "?";
}

void InputReport::add(InputProblem problem, std::string where_and_what) {
  const auto kind = static_cast<std::size_t>(problem);
  ++problems[kind];
  if (examples[kind].size() < kExamplesPerKind) examples[kind].push_back(std::move(where_and_what));
}

std::int64_t InputReport::problem_count() const {
  std::int64_t total = 0;
  for (std::int64_t count : problems) total += count;
  return total;
}

void InputReport::merge(const InputReport& other) {
  files += other.files;
  documents += other.documents;
  document_bytes += other.document_bytes;
  input_bytes += other.input_bytes;
  empty_documents += other.empty_documents;
  unchecked_frames += other.unchecked_frames;
  for (std::size_t kind = 0; kind < problems.size(); ++kind) {
    problems[kind] += other.problems[kind];
    for (const std::string& example : other.examples[kind]) {
      if (examples[kind].size() < kExamplesPerKind) examples[kind].push_back(example);
    }
  }
}

std::string InputReport::describe_problems() const {
  std::ostringstream out;
  if (unchecked_frames > 0) {
    out << "unchecked_frames: " << unchecked_frames
        << " zstd frame(s) without a content checksum: their documents were kept unverified\n";
  }
  for (std::size_t kind = 0; kind < problems.size(); ++kind) {
    if (problems[kind] == 0) continue;
    out << input_problem_name(static_cast<InputProblem>(kind)) << ": " << problems[kind];
    for (const std::string& example : examples[kind]) out << "\n    " << example;
    out << "\n";
  }
  return out.str();
}

std::size_t first_invalid_utf8(std::string_view text) {
  const auto* bytes = reinterpret_cast<const unsigned char*>(text.data());
  const std::size_t n = text.size();
  std::size_t i = 0;
  while (i < n) {
    const unsigned char lead = bytes[i];
    if (lead < 0x80) {
      ++i;
      continue;
    }
    std::size_t length = 0;
    std::uint32_t code = 0, smallest = 0;
    if ((lead & 0xE0) == 0xC0) {
      length = 2, code = lead & 0x1Fu, smallest = 0x80;
    } else if ((lead & 0xF0) == 0xE0) {
      length = 3, code = lead & 0x0Fu, smallest = 0x800;
    } else if ((lead & 0xF8) == 0xF0) {
      length = 4, code = lead & 0x07u, smallest = 0x10000;
    } else {
      return i;  // a continuation byte or 0xF8..0xFF where a character must start
    }
    if (i + length > n) return i;
    for (std::size_t k = 1; k < length; ++k) {
      if ((bytes[i + k] & 0xC0) != 0x80) return i;
      code = (code << 6) | (bytes[i + k] & 0x3Fu);
    }
    if (code < smallest || code > 0x10FFFF || (code >= 0xD800 && code <= 0xDFFF)) return i;
    i += length;
  }
  return std::string_view::npos;
}

void for_each_file_document(const std::string& path, const SourceOptions& options, InputReport& report,
                            const std::function<void(std::string_view)>& visit) {
  for_each_file_document_at(path, options, report, [&](std::string_view text, std::int64_t) { visit(text); });
}

void for_each_file_document_at(const std::string& path, const SourceOptions& options, InputReport& report,
                               const std::function<void(std::string_view, std::int64_t)>& visit) {
  for_each_file_record(path, options, report, [&](const DocumentRecord& record) { visit(record.text, record.line); });
}

void for_each_file_record(const std::string& path, const SourceOptions& options, InputReport& report,
                          const std::function<void(const DocumentRecord&)>& visit) {
  ++report.files;
  const FileFormat format = file_format_of(path);
  {
    std::unique_ptr<std::FILE, FileCloser> probe(std::fopen(path.c_str(), "rb"));
    if (probe && std::fgetc(probe.get()) == EOF && !std::ferror(probe.get())) {
      report.add(InputProblem::empty_file, path + ": no bytes");
      return;
    }
  }
  ByteStream stream(path, format.zstd, report);
  auto accept = [&](std::string_view text, std::int64_t line, std::string_view json = {}) {
    const std::string at = where(path, line);
    if (text.empty()) {
      ++report.empty_documents;
      return;
    }
    const std::size_t bad = first_invalid_utf8(text);
    if (bad != std::string_view::npos) {
      report.add(InputProblem::invalid_utf8, at + ": byte " + std::to_string(bad) + " of the document is not UTF-8");
      return;
    }
    ++report.documents;
    report.document_bytes += static_cast<std::int64_t>(text.size());
    visit(DocumentRecord{text, line, json});
  };
  auto too_long = [&](std::int64_t line) {
    report.add(InputProblem::too_long,
               where(path, line) + ": longer than " + std::to_string(options.max_document_bytes) + " bytes");
  };

  if (format.format == InputFormat::jsonl) {
    for_each_line(
        stream, options.max_document_bytes,
        [&](std::string_view raw, std::int64_t number) {
          const std::string_view line = without_cr(raw);
          if (blank(line)) return;
          const std::size_t bad = first_invalid_utf8(line);
          if (bad != std::string_view::npos) {
            report.add(InputProblem::invalid_utf8,
                       where(path, number) + ": byte " + std::to_string(bad) + " is not UTF-8");
            return;
          }
          const nlohmann::json object = nlohmann::json::parse(line, nullptr, false);
          if (object.is_discarded()) {
            report.add(InputProblem::not_json, where(path, number) + ": not a JSON value");
            return;
          }
          const auto field = object.is_object() ? object.find(options.text_field) : object.end();
          if (!object.is_object() || field == object.end() || !field->is_string()) {
            report.add(InputProblem::missing_field,
                       where(path, number) + ": no string field \"" + options.text_field + "\"");
            return;
          }
          accept(field->get_ref<const std::string&>(), number, line);
        },
        too_long);
    return;
  }

  if (options.separator.empty()) {  // the whole file is one document
    std::string text;
    bool overlong = false;
    for (std::string_view chunk = stream.next(); !chunk.empty(); chunk = stream.next()) {
      if (static_cast<std::int64_t>(text.size() + chunk.size()) > options.max_document_bytes) {
        overlong = true;
        break;
      }
      text.append(chunk);
    }
    if (overlong) {
      too_long(1);
    } else if (!stream.truncated()) {
      accept(text, 1);
    }
    return;
  }

  std::string document;
  std::int64_t first_line = 1;
  bool overlong = false;
  auto finish = [&](std::int64_t next_line) {
    if (overlong) {
      too_long(first_line);
    } else {
      accept(document, first_line);
    }
    document.clear();
    overlong = false;
    first_line = next_line;
  };
  for_each_line(
      stream, options.max_document_bytes,
      [&](std::string_view raw, std::int64_t number) {
        if (without_cr(raw) == options.separator) {
          finish(number + 1);
          return;
        }
        if (overlong) return;
        if (static_cast<std::int64_t>(document.size() + raw.size() + 1) > options.max_document_bytes) {
          overlong = true;
          document.clear();
          return;
        }
        document.append(raw);
        document.push_back('\n');
      },
      [&](std::int64_t) { overlong = true; });
  if (overlong || !document.empty()) finish(0);
}

}  // namespace myriad::data
