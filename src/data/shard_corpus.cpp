// Corpus sharding across workers: tokenize by file, agree on counts, write shards round-robin
// from the temporary token files, manifest (see shard_corpus.h).
#include "myriad/data/shard_corpus.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>

#include "document_batches.h"
#include "file_assignment.h"
#include "report_json.h"
#include "myriad/core/error.h"
#include "myriad/data/shard_manifest.h"
#include "myriad/data/shard_writer.h"
#include "myriad/data/token_shard.h"

namespace myriad::data {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Appends to a temporary file of raw native int32 / int64 values (encrypted when the corpus's
// shards are: token ids never land on disk in clear then).
class ValueFile {
 public:
  ValueFile(const std::string& path, const AtRest& at_rest) : out_(at_rest.create(path, AtRest::kChunkBytes, false)) {}
  template <typename T>
  void append(const T* values, std::size_t count) {
    out_->write(values, count * sizeof(T));
  }
  void close() { out_->finish(); }

 private:
  std::unique_ptr<StoredFileWriter> out_;
};

// Reads a temporary value file front to back, 1 MiB at a time (documents are read one by one:
// a read per document would be a system call, or a chunk opening, per document).
class ValueReader {
 public:
  ValueReader(const std::string& path, const AtRest& at_rest) : in_(at_rest.open(path)), size_(in_->size()) {}
  // Whether `count` more values were there (false when the file ends first).
  template <typename T>
  bool read(T* values, std::size_t count) {
    std::uint64_t bytes = count * sizeof(T);
    if (at_ + bytes > size_) return false;
    auto* out = reinterpret_cast<char*>(values);
    while (bytes > 0) {
      if (at_ == buffer_end_) refill();
      const auto take = static_cast<std::size_t>(std::min<std::uint64_t>(bytes, buffer_end_ - at_));
      std::memcpy(out, buffer_.data() + (at_ - buffer_start_), take);
      out += take;
      at_ += take;
      bytes -= take;
    }
    return true;
  }

 private:
  void refill() {
    buffer_start_ = at_;
    buffer_.resize(static_cast<std::size_t>(std::min<std::uint64_t>(std::uint64_t{1} << 20, size_ - at_)));
    in_->read_at(at_, buffer_.data(), buffer_.size());
    buffer_end_ = at_ + buffer_.size();
  }

  std::unique_ptr<StoredFileReader> in_;
  std::uint64_t size_, at_ = 0, buffer_start_ = 0, buffer_end_ = 0;
  std::vector<char> buffer_;
};

// Reads `count` int32 values at value index `first` of the file.
void read_range(const std::string& path, std::int64_t first, std::int64_t count, std::int32_t* out,
                const AtRest& at_rest) {
  if (count > 0)
    at_rest.open(path)->read_at(static_cast<std::uint64_t>(first) * sizeof(std::int32_t), out,
                                static_cast<std::size_t>(count) * sizeof(std::int32_t));
}

// One temporary token file's contribution to a split stream.
struct Piece {
  std::string path;
  std::int64_t first = 0, count = 0;
};

// Writes shard `index` of a split stream made of `pieces` (in order), tokens [begin, end).
ShardInfo write_shard(const ShardCorpusOptions& options, const std::string& split, std::int64_t index,
                      const std::vector<Piece>& pieces, const std::vector<std::int64_t>& piece_start,
                      std::int64_t begin, std::int64_t end, std::uint32_t vocab_size) {
  std::vector<std::int32_t> tokens(static_cast<std::size_t>(end - begin));
  std::int64_t at = begin;
  auto p = static_cast<std::size_t>(std::upper_bound(piece_start.begin(), piece_start.end(), begin) -
                                    piece_start.begin() - 1);
  while (at < end) {
    const Piece& piece = pieces[p];
    const std::int64_t local = at - piece_start[p];
    const std::int64_t take = std::min(end - at, piece.count - local);
    if (take > 0) {
      read_range(piece.path, piece.first + local, take, tokens.data() + (at - begin), options.at_rest);
      at += take;
    }
    ++p;
  }
  ShardInfo info;
  info.path = shard_path(options.output_dir, split, index);
  info.tokens = end - begin;
  if (options.compression) {
    write_compressed_token_shard(info.path, tokens, vocab_size, *options.compression, options.at_rest);
  } else {
    write_token_shard(info.path, tokens, vocab_size, options.at_rest);
  }
  // The manifest describes the shard's own bytes (decrypted, for an encrypted one): a key rotation
  // rewraps the file without changing what is recorded.
  const std::unique_ptr<StoredFileReader> written = options.at_rest.open(info.path);
  info.bytes = static_cast<std::int64_t>(written->size());
  info.crc32 = stored_file_crc(*written);
  return info;
}

}  // namespace

ShardCorpusSummary shard_corpus(const ShardCorpusOptions& options, const TextEncoding& encoding, WorkerGroup& workers) {
  MYRIAD_CHECK(options.shard_tokens > 0, "shard_tokens must be positive, got " << options.shard_tokens);
  MYRIAD_CHECK(options.val_fraction >= 0.0 && options.val_fraction <= 1.0,
               "val_fraction " << options.val_fraction << " must lie in [0, 1]");
  MYRIAD_CHECK(!options.output_dir.empty(), "an output directory is required");
  const int rank = workers.rank(), size = workers.size();
  const std::vector<std::string> files = list_corpus_files(options.inputs, options.extensions);
  MYRIAD_CHECK(!files.empty(), "the inputs hold no files");
  const std::string temp = (fs::path(options.output_dir) / ".tokenize").string();
  if (rank == 0) {
    std::error_code error;
    fs::create_directories(options.output_dir, error);
    MYRIAD_CHECK(!error, "cannot create output directory '" << options.output_dir << "': " << error.message());
    for (const fs::directory_entry& entry : fs::directory_iterator(options.output_dir)) {
      const std::string name = entry.path().filename().string();
      MYRIAD_CHECK(!((name.starts_with("train_") || name.starts_with("val_")) && name.ends_with(".bin")),
                   "output directory '" << options.output_dir << "' already holds token shards (e.g. '" << name
                                        << "'); use an empty directory or remove them");
    }
    fs::remove_all(temp);  // left by an interrupted run
    fs::create_directories(temp);
  }
  workers.barrier();
  auto temp_file = [&](std::size_t f, const char* kind) {
    return (fs::path(temp) / ("file_" + std::to_string(f) + "." + kind)).string();
  };

  // 1. Tokenize this worker's files into <temp>/file_<f>.ids (eot + document, ...) and .docs
  //    (tokens per document, eot included).
  const std::vector<int> owner = detail::assign_files(files, size);
  std::vector<std::size_t> mine;
  std::int64_t my_bytes = 0, done_bytes = 0;
  for (std::size_t f = 0; f < files.size(); ++f) {
    if (owner[f] != rank) continue;
    mine.push_back(f);
    std::error_code error;
    my_bytes += static_cast<std::int64_t>(fs::file_size(files[f], error));
  }
  std::vector<std::int64_t> my_counts;  // per own file: f, documents, tokens
  json my_sources = json::array();
  for (std::size_t f : mine) {
    InputReport report;
    ValueFile ids(temp_file(f, "ids"), options.at_rest), docs(temp_file(f, "docs"), options.at_rest);
    std::int64_t documents = 0, tokens = 0;
    detail::for_each_document_batch(
        files[f], options.source, report, options.batch_bytes,
        [&](const std::deque<std::string>& texts, const std::vector<std::int64_t>&) {
          std::vector<std::vector<std::int32_t>> encoded(texts.size());
          const auto n = static_cast<std::int64_t>(texts.size());
#pragma omp parallel for schedule(dynamic, 1)
          for (std::int64_t i = 0; i < n; ++i)
            encoded[static_cast<std::size_t>(i)] = encoding.encode(texts[static_cast<std::size_t>(i)]);
          for (const std::vector<std::int32_t>& e : encoded) {
            ids.append(&encoding.eot_id, 1);
            ids.append(e.data(), e.size());
            const std::int64_t length = static_cast<std::int64_t>(e.size()) + 1;
            docs.append(&length, 1);
            tokens += length;
          }
          documents += n;
        },
        [&](std::int64_t bytes) {
          done_bytes += bytes;
          if (options.progress) options.progress(done_bytes, my_bytes);
        });
    ids.close();
    docs.close();
    my_counts.insert(my_counts.end(), {static_cast<std::int64_t>(f), documents, tokens});
    json source = detail::input_report_json(report);
    source["path"] = files[f];
    source["index"] = f;
    source["tokens"] = tokens;
    my_sources.push_back(source);
  }

  // 2. Every file's counts, in file order: global document indices and stream offsets.
  std::vector<std::int64_t> file_documents(files.size(), 0), file_tokens(files.size(), 0);
  for (const std::vector<std::int64_t>& counts : workers.all_gather(my_counts)) {
    for (std::size_t i = 0; i + 2 < counts.size(); i += 3) {
      file_documents[static_cast<std::size_t>(counts[i])] = counts[i + 1];
      file_tokens[static_cast<std::size_t>(counts[i])] = counts[i + 2];
    }
  }
  std::vector<std::int64_t> first_document(files.size() + 1, 0);
  for (std::size_t f = 0; f < files.size(); ++f) first_document[f + 1] = first_document[f] + file_documents[f];
  const std::int64_t total_tokens = std::accumulate(file_tokens.begin(), file_tokens.end(), std::int64_t{0});

  // 3. The split streams as pieces of temporary files.
  std::vector<Piece> train, val;
  ShardCorpusSummary summary;
  if (options.val_split == ValSplit::tail) {
    const auto held_out =
        static_cast<std::int64_t>(std::floor(options.val_fraction * static_cast<double>(total_tokens)));
    const std::int64_t cut = total_tokens - held_out;
    std::int64_t at = 0;
    for (std::size_t f = 0; f < files.size(); ++f) {
      const std::int64_t n = file_tokens[f];
      const std::int64_t to_train = std::clamp<std::int64_t>(cut - at, 0, n);
      if (to_train > 0) train.push_back({temp_file(f, "ids"), 0, to_train});
      if (n - to_train > 0) val.push_back({temp_file(f, "ids"), to_train, n - to_train});
      at += n;
    }
    summary.train_documents = first_document.back();
  } else {
    // The owner splits each of its files into .train and .val by the documents' global indices.
    std::vector<std::int64_t> split_counts;  // per own file: f, train docs, train tokens, val docs, val tokens
    for (std::size_t f : mine) {
      // Streamed document by document: memory is one document's tokens.
      ValueReader lengths(temp_file(f, "docs"), options.at_rest), all(temp_file(f, "ids"), options.at_rest);
      ValueFile to_train(temp_file(f, "train"), options.at_rest), to_val(temp_file(f, "val"), options.at_rest);
      std::int64_t train_docs = 0, train_tokens = 0, val_docs = 0, val_tokens = 0, length = 0;
      std::vector<std::int32_t> document;
      for (std::int64_t d = 0; lengths.read(&length, 1); ++d) {
        document.resize(static_cast<std::size_t>(length));
        MYRIAD_CHECK(all.read(document.data(), document.size()),
                     "temporary token file of '" << files[f] << "' is shorter than its document list");
        const bool held = is_val_document(first_document[f] + d, options.val_fraction);
        (held ? to_val : to_train).append(document.data(), document.size());
        (held ? val_docs : train_docs) += 1;
        (held ? val_tokens : train_tokens) += length;
      }
      to_train.close();
      to_val.close();
      split_counts.insert(split_counts.end(),
                          {static_cast<std::int64_t>(f), train_docs, train_tokens, val_docs, val_tokens});
    }
    std::vector<std::int64_t> train_tokens(files.size(), 0), val_tokens(files.size(), 0);
    for (const std::vector<std::int64_t>& counts : workers.all_gather(split_counts)) {
      for (std::size_t i = 0; i + 4 < counts.size(); i += 5) {
        const auto f = static_cast<std::size_t>(counts[i]);
        summary.train_documents += counts[i + 1];
        train_tokens[f] = counts[i + 2];
        summary.val_documents += counts[i + 3];
        val_tokens[f] = counts[i + 4];
      }
    }
    for (std::size_t f = 0; f < files.size(); ++f) {
      if (train_tokens[f] > 0) train.push_back({temp_file(f, "train"), 0, train_tokens[f]});
      if (val_tokens[f] > 0) val.push_back({temp_file(f, "val"), 0, val_tokens[f]});
    }
  }

  // 4. Shards, round-robin over the workers (train shards first, then val).
  std::vector<std::int64_t> my_shards;  // per shard written here: split (0/1), index, tokens, bytes, crc
  std::int64_t shard_number = 0;
  auto write_split = [&](const std::string& name, int split, const std::vector<Piece>& pieces) {
    std::vector<std::int64_t> start(pieces.size(), 0);
    std::int64_t total = 0;
    for (std::size_t p = 0; p < pieces.size(); ++p) {
      start[p] = total;
      total += pieces[p].count;
    }
    const std::int64_t shards = (total + options.shard_tokens - 1) / options.shard_tokens;
    for (std::int64_t k = 0; k < shards; ++k, ++shard_number) {
      if (shard_number % size != rank) continue;
      const ShardInfo info = write_shard(options, name, k, pieces, start, k * options.shard_tokens,
                                         std::min(total, (k + 1) * options.shard_tokens), encoding.vocab_size);
      my_shards.insert(my_shards.end(), {split, k, info.tokens, info.bytes, static_cast<std::int64_t>(info.crc32)});
    }
    return total;
  };
  summary.train_tokens = write_split("train", 0, train);
  summary.val_tokens = write_split("val", 1, val);
  for (const std::vector<std::int64_t>& shards : workers.all_gather(my_shards)) {
    for (std::size_t i = 0; i + 4 < shards.size(); i += 5) {
      std::vector<ShardInfo>& list = shards[i] == 0 ? summary.train_shards : summary.val_shards;
      const auto k = static_cast<std::size_t>(shards[i + 1]);
      if (list.size() <= k) list.resize(k + 1);
      list[k] = ShardInfo{shard_path(options.output_dir, shards[i] == 0 ? "train" : "val", shards[i + 1]),
                          shards[i + 2], shards[i + 3], static_cast<std::uint32_t>(shards[i + 4])};
    }
  }

  // 5. Reports, manifest, clean-up.
  json sources = json::array();
  for (const std::string& part : workers.all_gather_bytes(my_sources.dump())) {
    for (const json& source : json::parse(part)) sources.push_back(source);
  }
  std::sort(sources.begin(), sources.end(), [](const json& a, const json& b) {
    return a.at("index").get<std::int64_t>() < b.at("index").get<std::int64_t>();
  });
  for (const json& source : sources) summary.report.merge(detail::input_report_from_json(source));
  summary.manifest_path = (fs::path(options.output_dir) / "manifest.json").string();
  workers.barrier();  // every shard written, every temporary file read
  if (rank == 0) {
    json tokenizer_files = json::array();
    for (const std::string& path : encoding.files) {
      std::ifstream in(path, std::ios::binary);
      const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      tokenizer_files.push_back(
          {{"path", path}, {"bytes", bytes.size()}, {"crc32", crc32(bytes.data(), bytes.size())}});
    }
    auto shard_list = [](const std::vector<ShardInfo>& shards) {
      json list = json::array();
      for (const ShardInfo& s : shards) {
        list.push_back({{"file", fs::path(s.path).filename().string()},
                        {"tokens", s.tokens},
                        {"bytes", s.bytes},
                        {"crc32", s.crc32}});
      }
      return list;
    };
    json manifest = {
        {"format", "myriad token shards"},
        {"created_by", "myriad-data tokenize"},
        {"tokenizer",
         {{"spec", encoding.spec},
          {"vocab_size", encoding.vocab_size},
          {"eot_id", encoding.eot_id},
          {"files", tokenizer_files}}},
        {"options",
         {{"val_fraction", options.val_fraction},
          {"val_split", options.val_split == ValSplit::tail ? "tail" : "documents"},
          {"shard_tokens", options.shard_tokens},
          {"separator", options.source.separator},
          {"text_field", options.source.text_field},
          {"max_document_bytes", options.source.max_document_bytes},
          {"compression", options.compression ? json{{"codec", "zstd"},
                                                     {"block_tokens", options.compression->block_tokens},
                                                     {"level", options.compression->level}}
                                              : json(nullptr)}}},
        {"totals", detail::input_report_json(summary.report)},
        {"splits",
         {{"train",
           {{"documents", summary.train_documents},
            {"tokens", summary.train_tokens},
            {"shards", shard_list(summary.train_shards)}}},
          {"val",
           {{"documents", summary.val_documents},
            {"tokens", summary.val_tokens},
            {"shards", shard_list(summary.val_shards)}}}}},
        {"sources", sources},
    };
    const std::string tmp = summary.manifest_path + ".tmp";
    {
      std::ofstream out(tmp, std::ios::trunc);
      out << manifest.dump(2) << "\n";
      MYRIAD_CHECK(out.good(), "cannot write '" << tmp << "'");
    }
    fs::rename(tmp, summary.manifest_path);
    fs::remove_all(temp);
  }
  workers.barrier();
  return summary;
}

}  // namespace myriad::data
