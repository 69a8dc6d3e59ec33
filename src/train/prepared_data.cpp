// Corpus resolution, tokenizer loading/training and cached tokenization (see prepared_data.h).
#include "myriad/train/prepared_data.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "myriad/data/tokenize_corpus.h"
#include "myriad/core/error.h"
#include "myriad/core/progress_bar.h"
#include "myriad/data/token_shard.h"

namespace fs = std::filesystem;

namespace myriad::train {

namespace {

bool has_shards(const std::string& dir, const std::string& split) {
  if (!fs::is_directory(dir)) return false;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind(split + "_", 0) == 0 && entry.path().extension() == ".bin") return true;
  }
  return false;
}

std::string read_text(const std::string& path) {
  std::ifstream in(path);
  std::stringstream buffer;
  buffer << in.rdbuf();
  return buffer.str();
}

// Text the BPE trainer sees: the corpus documents joined by newlines, at most `limit` bytes.
std::string training_text(const std::vector<std::string>& files, const std::string& separator, std::size_t limit) {
  std::string text;
  data::for_each_document(files, separator, [&](std::string_view doc) {
    if (text.size() < limit) {
      text.append(doc.substr(0, limit - text.size()));
      text.push_back('\n');
    }
  });
  return text;
}

// The corpus to read: data.path, or the default fortune files (documents split by "%" lines).
struct Corpus {
  std::string path;
  std::string separator;
  std::vector<std::string> extensions;
};

Corpus resolve_corpus(const RunConfig& config) {
  Corpus corpus{config.data.path, "", {}};
  if (corpus.path.empty()) {
    corpus.path = kDefaultCorpusDir;
    corpus.separator = "%";
    corpus.extensions = {""};  // the fortune text files have no extension (.dat indexes and .u8 links are skipped)
    MYRIAD_CHECK(fs::is_directory(corpus.path), "data.path is empty, so the default corpus " << corpus.path
                                                    << " is used, but it is not installed; run scripts/setup.sh "
                                                       "(Debian package fortunes) or set data.path");
  }
  MYRIAD_CHECK(fs::exists(corpus.path), "data.path '" << corpus.path << "' does not exist");
  return corpus;
}

void remove_shards(const std::string& dir) {
  if (!fs::exists(dir)) return;
  for (const auto& entry : fs::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if ((name.rfind("train_", 0) == 0 || name.rfind("val_", 0) == 0) && entry.path().extension() == ".bin") {
      fs::remove(entry.path());
    }
  }
}

// Tokenizes `files` of the corpus into `cache` with `tok`.
void tokenize_into(const Corpus& corpus, const std::vector<std::string>& files, double val_fraction,
                   const data::BpeTokenizer& tok, const std::string& cache, spdlog::logger& log) {
  data::TokenizeOptions options;
  options.inputs = {corpus.path};
  options.output_dir = cache;
  options.separator = corpus.separator;
  options.extensions = corpus.extensions;
  options.val_fraction = val_fraction;
  // One undivided file is one document: hold out its tail instead of whole documents.
  const bool single_document = corpus.separator.empty() && files.size() == 1;
  options.val_split = single_document ? data::ValSplit::tail : data::ValSplit::documents;
  ProgressBar bar("tokenizing " + corpus.path, static_cast<std::int64_t>(files.size()), true);
  options.progress = [&bar](std::int64_t done, std::int64_t) { bar.update(done); };
  data::TokenizeSummary summary = data::tokenize_corpus(
      options, [&tok](std::string_view text) { return tok.encode(text); }, tok.eot_id(),
      static_cast<std::uint32_t>(tok.vocab_size()));
  bar.finish();
  log.info("data: {} documents, {} bytes -> {} train + {} val tokens in {}", summary.documents, summary.bytes,
           summary.train_tokens, summary.val_tokens, cache);
}

}  // namespace

PreparedData prepare_data(const RunConfig& config, spdlog::logger& log) {
  PreparedData prepared;
  const Corpus corpus = resolve_corpus(config);
  const std::string spec_text =
      config.data.tokenizer.empty() ? "train:" + std::to_string(config.model.vocab_size) : config.data.tokenizer;
  const TokenizerSpec spec = parse_tokenizer_spec(spec_text);
  const bool trained = spec.kind == "train";
  auto load = [](std::string_view kind, const std::string& argument) {
    return std::make_shared<data::BpeTokenizer>(data::load_tokenizer(kind, argument));
  };

  if (has_shards(corpus.path, "train")) {
    // Shards given directly: the tokenizer (for generation) is the spec's, or one saved beside them.
    prepared.shard_dir = corpus.path;
    const fs::path beside = fs::path(corpus.path) / "tokenizer.bpe";
    if (!trained) prepared.tokenizer = load(spec.kind, spec.argument);
    else if (fs::exists(beside)) prepared.tokenizer = load("bpe", beside.string());
  } else {
    const std::string cache = config.data.cache_dir.empty() ? (fs::path(config.logging.dir) / "data").string()
                                                            : config.data.cache_dir;
    std::ostringstream source;
    source << "path=" << fs::absolute(corpus.path).string() << "\ntokenizer=" << spec_text
           << "\nval_fraction=" << config.data.val_fraction << "\nseparator=" << corpus.separator << "\n";
    const fs::path source_file = fs::path(cache) / "source.txt";
    const fs::path tokenizer_file = fs::path(cache) / "tokenizer.bpe";
    const bool cached = has_shards(cache, "train") && fs::exists(source_file) && read_text(source_file) == source.str();
    if (cached) {
      log.info("data: reusing token shards in {}", cache);
      prepared.tokenizer = trained ? load("bpe", tokenizer_file.string()) : load(spec.kind, spec.argument);
    } else {
      remove_shards(cache);
      fs::create_directories(cache);
      const std::vector<std::string> files = data::list_corpus_files({corpus.path}, corpus.extensions);
      if (trained) {
        const std::int32_t vocab = static_cast<std::int32_t>(std::stol(spec.argument));
        log.info("data: training a byte-level BPE of {} tokens on {}", vocab, corpus.path);
        std::string text = training_text(files, corpus.separator, 8u << 20);
        prepared.tokenizer = std::make_shared<data::BpeTokenizer>(data::BpeTokenizer::train(text, vocab));
        prepared.tokenizer->save(tokenizer_file.string());
      } else {
        prepared.tokenizer = load(spec.kind, spec.argument);
      }
      tokenize_into(corpus, files, config.data.val_fraction, *prepared.tokenizer, cache, log);
      std::ofstream(source_file) << source.str();
    }
    prepared.shard_dir = cache;
  }
  data::ShardSet train = data::ShardSet::open_split(prepared.shard_dir, "train", false);
  prepared.vocab_size = train.vocab_size();
  return prepared;
}

}  // namespace myriad::train
