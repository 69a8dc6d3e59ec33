// Corpus tokenization: file listing, document splitting, the val rule, and the batched parallel
// encode that appends [eot, tokens...] per document to the train or val shard writer in order.
#include "myriad/data/tokenize_corpus.h"

#include <algorithm>
#include <cmath>
#include <deque>
#include <exception>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "myriad/core/error.h"
#include "myriad/data/shard_writer.h"
#include "myriad/data/token_shard.h"

namespace myriad::data {

namespace fs = std::filesystem;

namespace {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MYRIAD_CHECK(in, "tokenize_corpus: cannot open '" << path << "'");
  std::ostringstream text;
  text << in.rdbuf();
  MYRIAD_CHECK(!in.bad(), "tokenize_corpus: error while reading '" << path << "'");
  return std::move(text).str();
}

bool is_hidden(const fs::path& path) {
  std::string name = path.filename().string();
  return !name.empty() && name[0] == '.';
}

bool has_extension(const fs::path& path, const std::vector<std::string>& extensions) {
  if (extensions.empty()) return true;
  std::string extension = path.extension().string();
  return std::find(extensions.begin(), extensions.end(), extension) != extensions.end();
}

void check_no_existing_shards(const std::string& directory) {
  std::error_code error;
  for (const fs::directory_entry& entry : fs::directory_iterator(directory, error)) {
    std::string name = entry.path().filename().string();
    bool shard = (name.starts_with("train_") || name.starts_with("val_")) && name.ends_with(".bin");
    MYRIAD_CHECK(!shard, "tokenize_corpus: output directory '" << directory << "' already holds token shards (e.g. '"
                                                               << name << "'); use an empty directory or remove them");
  }
  MYRIAD_CHECK(!error, "tokenize_corpus: cannot list output directory '" << directory << "': " << error.message());
}

// ValSplit::tail: moves the last val_tokens tokens of the train shards (all full but the last,
// max_tokens each) into val shards, then rewrites the train shard holding the cut and removes
// those after it. Returns the remaining train shard paths.
std::vector<std::string> move_tail_to_val(const std::vector<std::string>& train_paths, std::int64_t max_tokens,
                                          std::int64_t val_tokens, ShardSequenceWriter& val, const AtRest& at_rest) {
  if (val_tokens == 0) return train_paths;
  std::int64_t total = 0;
  for (const std::string& path : train_paths) total += TokenShard::open(path, false, at_rest).size();
  const std::int64_t cut = total - val_tokens;
  std::vector<std::int32_t> buffer;
  constexpr std::int64_t kCopyChunk = 1 << 20;
  for (std::size_t k = static_cast<std::size_t>(cut / max_tokens); k < train_paths.size(); ++k) {
    TokenShard shard = TokenShard::open(train_paths[k], false, at_rest);
    const std::int64_t start = static_cast<std::int64_t>(k) * max_tokens;
    for (std::int64_t from = std::max<std::int64_t>(cut - start, 0); from < shard.size(); from += kCopyChunk) {
      const std::int64_t n = std::min(kCopyChunk, shard.size() - from);
      buffer.resize(static_cast<std::size_t>(n));
      shard.read(from, n, buffer.data());
      val.append(buffer);
    }
  }
  const auto keep = static_cast<std::size_t>((cut + max_tokens - 1) / max_tokens);  // shards with tokens < cut
  if (cut % max_tokens != 0) {
    const std::int64_t start = static_cast<std::int64_t>(keep - 1) * max_tokens;
    buffer.resize(static_cast<std::size_t>(cut - start));
    std::uint32_t vocab_size;
    {
      TokenShard shard = TokenShard::open(train_paths[keep - 1], false, at_rest);
      shard.read(0, cut - start, buffer.data());
      vocab_size = shard.vocab_size();
    }
    write_token_shard(train_paths[keep - 1], buffer, vocab_size, at_rest);
  }
  for (std::size_t k = keep; k < train_paths.size(); ++k) {
    std::error_code error;
    fs::remove(train_paths[k], error);
    MYRIAD_CHECK(!error, "tokenize_corpus: cannot remove '" << train_paths[k] << "': " << error.message());
  }
  return std::vector<std::string>(train_paths.begin(), train_paths.begin() + static_cast<std::ptrdiff_t>(keep));
}

struct PendingDocument {
  std::string_view text;
  std::int64_t index;  // global document number
  const std::string* file;
};

}  // namespace

std::vector<std::string> list_corpus_files(const std::vector<std::string>& inputs,
                                           const std::vector<std::string>& extensions) {
  std::vector<std::string> files;
  for (const std::string& input : inputs) {
    std::error_code error;
    fs::file_status status = fs::status(input, error);
    MYRIAD_CHECK(!error && fs::exists(status), "tokenize_corpus: input '" << input << "' does not exist");
    if (!fs::is_directory(status)) {
      files.push_back(input);
      continue;
    }
    std::vector<std::string> found;
    fs::recursive_directory_iterator it(input, fs::directory_options::none, error), end;
    MYRIAD_CHECK(!error, "tokenize_corpus: cannot list '" << input << "': " << error.message());
    for (; it != end; it.increment(error)) {
      MYRIAD_CHECK(!error, "tokenize_corpus: cannot list '" << input << "': " << error.message());
      if (is_hidden(it->path())) {
        if (it->is_directory()) it.disable_recursion_pending();
        continue;
      }
      if (it->is_regular_file() && has_extension(it->path(), extensions)) found.push_back(it->path().string());
    }
    MYRIAD_CHECK(!error, "tokenize_corpus: cannot list '" << input << "': " << error.message());
    std::sort(found.begin(), found.end());
    files.insert(files.end(), found.begin(), found.end());
  }
  return files;
}

std::vector<std::string_view> split_documents(std::string_view text, const std::string& separator) {
  std::vector<std::string_view> documents;
  auto keep = [&](std::size_t begin, std::size_t end) {
    if (end > begin) documents.push_back(text.substr(begin, end - begin));
  };
  if (separator.empty()) {
    keep(0, text.size());
    return documents;
  }
  std::size_t doc_begin = 0, line_begin = 0;
  while (line_begin < text.size()) {
    std::size_t newline = text.find('\n', line_begin);
    std::size_t line_end = newline == std::string_view::npos ? text.size() : newline;
    std::string_view line = text.substr(line_begin, line_end - line_begin);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    std::size_t next = newline == std::string_view::npos ? text.size() : newline + 1;
    if (line == separator) {
      keep(doc_begin, line_begin);
      doc_begin = next;
    }
    line_begin = next;
  }
  keep(doc_begin, text.size());
  return documents;
}

ValSplit parse_val_split(std::string_view name) {
  if (name == "documents") return ValSplit::documents;
  if (name == "tail") return ValSplit::tail;
  MYRIAD_THROW("unknown val split '" << name << "'; allowed: documents, tail");
}

bool is_val_document(std::int64_t index, double val_fraction) {
  const auto i = static_cast<double>(index);
  return std::floor((i + 1) * val_fraction) > std::floor(i * val_fraction);
}

void for_each_document(const std::vector<std::string>& files, const std::string& separator,
                       const std::function<void(std::string_view)>& visit) {
  for (const std::string& file : files) {
    std::string text = read_text_file(file);
    for (std::string_view document : split_documents(text, separator)) visit(document);
  }
}

TokenizeSummary tokenize_corpus(const TokenizeOptions& options, const TextEncoder& encode, std::int32_t eot_id,
                                std::uint32_t vocab_size) {
  MYRIAD_CHECK(!options.inputs.empty(), "tokenize_corpus: no inputs given");
  MYRIAD_CHECK(!options.output_dir.empty(), "tokenize_corpus: no output directory given");
  MYRIAD_CHECK(options.val_fraction >= 0.0 && options.val_fraction <= 1.0,
               "tokenize_corpus: val_fraction " << options.val_fraction << " outside [0, 1]");
  MYRIAD_CHECK(options.shard_tokens > 0,
               "tokenize_corpus: shard_tokens must be positive, got " << options.shard_tokens);
  MYRIAD_CHECK(options.batch_bytes > 0, "tokenize_corpus: batch_bytes must be positive, got " << options.batch_bytes);
  MYRIAD_CHECK(vocab_size > 0 && eot_id >= 0 && static_cast<std::uint32_t>(eot_id) < vocab_size,
               "tokenize_corpus: eot id " << eot_id << " outside the vocabulary [0, " << vocab_size << ")");
  MYRIAD_CHECK(static_cast<bool>(encode), "tokenize_corpus: no encoder given");

  TokenizeSummary summary;
  std::vector<std::string> files = list_corpus_files(options.inputs, options.extensions);
  MYRIAD_CHECK(!files.empty(), "tokenize_corpus: the inputs hold no files");
  summary.files = static_cast<std::int64_t>(files.size());

  std::error_code error;
  fs::create_directories(options.output_dir, error);
  MYRIAD_CHECK(!error,
               "tokenize_corpus: cannot create output directory '" << options.output_dir << "': " << error.message());
  check_no_existing_shards(options.output_dir);

  const bool tail = options.val_split == ValSplit::tail;
  ShardSequenceWriter train(options.output_dir, "train", vocab_size, options.shard_tokens, std::nullopt,
                            options.at_rest);
  ShardSequenceWriter val(options.output_dir, "val", vocab_size, options.shard_tokens, std::nullopt, options.at_rest);

  std::deque<std::string> texts;  // deque: elements never move, so document views stay valid
  std::vector<PendingDocument> batch;
  std::int64_t batch_bytes = 0;
  const std::int32_t eot[1] = {eot_id};

  auto encode_batch = [&]() {
    const auto n = static_cast<std::int64_t>(batch.size());
    std::vector<std::vector<std::int32_t>> tokens(batch.size());
    std::vector<std::exception_ptr> failures(batch.size());
    // Each document has its own output slot, so the dynamic schedule cannot change the result.
#pragma omp parallel for schedule(dynamic, 1)
    for (std::int64_t i = 0; i < n; ++i) {
      try {
        tokens[i] = encode(batch[i].text);
      } catch (...) {
        failures[i] = std::current_exception();
      }
    }
    for (std::size_t i = 0; i < batch.size(); ++i) {
      if (failures[i]) {
        try {
          std::rethrow_exception(failures[i]);
        } catch (const std::exception& e) {
          MYRIAD_THROW("tokenize_corpus: encoding document " << batch[i].index << " (from '" << *batch[i].file
                                                             << "') failed: " << e.what());
        }
      }
      bool to_val = tail ? false : is_val_document(batch[i].index, options.val_fraction);
      ShardSequenceWriter& writer = to_val ? val : train;
      writer.append(eot);
      writer.append(tokens[i]);
      auto count = static_cast<std::int64_t>(tokens[i].size()) + 1;
      (to_val ? summary.val_tokens : summary.train_tokens) += count;
      summary.val_documents += to_val ? 1 : 0;
    }
    batch.clear();
    texts.clear();
    batch_bytes = 0;
  };

  std::int64_t files_read = 0;
  const auto total_files = static_cast<std::int64_t>(files.size());
  for (const std::string& file : files) {
    texts.push_back(read_text_file(file));
    ++files_read;
    for (std::string_view document : split_documents(texts.back(), options.separator)) {
      batch.push_back({document, summary.documents++, &file});
      batch_bytes += static_cast<std::int64_t>(document.size());
      summary.bytes += static_cast<std::int64_t>(document.size());
    }
    if (batch_bytes >= options.batch_bytes) {
      encode_batch();
      if (options.progress) options.progress(files_read, total_files);
    }
  }
  encode_batch();
  if (options.progress) options.progress(total_files, total_files);
  train.finish();
  summary.train_shards = train.paths();
  if (tail) {
    const auto val_tokens =
        static_cast<std::int64_t>(std::floor(static_cast<double>(summary.train_tokens) * options.val_fraction));
    summary.train_shards =
        move_tail_to_val(summary.train_shards, options.shard_tokens, val_tokens, val, options.at_rest);
    summary.train_tokens -= val_tokens;
    summary.val_tokens = val_tokens;
  }
  val.finish();
  summary.val_shards = val.paths();
  return summary;
}

}  // namespace myriad::data
