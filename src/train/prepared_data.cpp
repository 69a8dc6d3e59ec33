// Corpus resolution, tokenizer loading/training and cached tokenization (see prepared_data.h).
#include "myriad/train/prepared_data.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "myriad/data/tokenize_corpus.h"
#include "myriad/core/error.h"
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

}  // namespace

PreparedData prepare_data(const RunConfig& config, spdlog::logger& log) {
  PreparedData prepared;
  std::string path = config.data.path;
  std::string separator;
  std::vector<std::string> extensions;
  if (path.empty()) {
    path = kDefaultCorpusDir;
    separator = "%";
    extensions = {""};  // the fortune text files have no extension (.dat indexes and .u8 links are skipped)
    MYRIAD_CHECK(fs::is_directory(path), "data.path is empty, so the default corpus " << path
                                             << " is used, but it is not installed; run scripts/setup.sh "
                                                "(Debian package fortunes) or set data.path");
  }
  MYRIAD_CHECK(fs::exists(path), "data.path '" << path << "' does not exist");

  const std::string spec_text =
      config.data.tokenizer.empty() ? "train:" + std::to_string(config.model.vocab_size) : config.data.tokenizer;
  const TokenizerSpec spec = parse_tokenizer_spec(spec_text);

  if (has_shards(path, "train")) {
    prepared.shard_dir = path;
    if (spec.kind == "gpt2") {
      prepared.tokenizer = std::make_shared<data::BpeTokenizer>(data::BpeTokenizer::load_gpt2(
          (fs::path(spec.argument) / "encoder.json").string(), (fs::path(spec.argument) / "vocab.bpe").string()));
    } else if (spec.kind == "bpe") {
      prepared.tokenizer = std::make_shared<data::BpeTokenizer>(data::BpeTokenizer::load(spec.argument));
    } else if (fs::exists(fs::path(path) / "tokenizer.bpe")) {
      prepared.tokenizer = std::make_shared<data::BpeTokenizer>(
          data::BpeTokenizer::load((fs::path(path) / "tokenizer.bpe").string()));
    }
  } else {
    const std::string cache = config.data.cache_dir.empty() ? (fs::path(config.logging.dir) / "data").string()
                                                            : config.data.cache_dir;
    std::ostringstream source;
    source << "path=" << fs::absolute(path).string() << "\ntokenizer=" << spec_text
           << "\nval_fraction=" << config.data.val_fraction << "\nseparator=" << separator << "\n";
    const fs::path source_file = fs::path(cache) / "source.txt";
    const fs::path tokenizer_file = fs::path(cache) / "tokenizer.bpe";
    const bool cached = has_shards(cache, "train") && fs::exists(source_file) && read_text(source_file) == source.str();
    if (cached) {
      log.info("data: reusing token shards in {}", cache);
      if (spec.kind == "train") {
        prepared.tokenizer = std::make_shared<data::BpeTokenizer>(data::BpeTokenizer::load(tokenizer_file.string()));
      }
    } else {
      if (fs::exists(cache)) {
        for (const auto& entry : fs::directory_iterator(cache)) {
          const std::string name = entry.path().filename().string();
          if ((name.rfind("train_", 0) == 0 || name.rfind("val_", 0) == 0) && entry.path().extension() == ".bin") {
            fs::remove(entry.path());
          }
        }
      }
      fs::create_directories(cache);
      const std::vector<std::string> files = data::list_corpus_files({path}, extensions);
      if (spec.kind == "train") {
        const std::int32_t vocab = static_cast<std::int32_t>(std::stol(spec.argument));
        log.info("data: training a byte-level BPE of {} tokens on {}", vocab, path);
        std::string text = training_text(files, separator, 8u << 20);
        prepared.tokenizer = std::make_shared<data::BpeTokenizer>(data::BpeTokenizer::train(text, vocab));
        prepared.tokenizer->save(tokenizer_file.string());
      }
    }
    if (!prepared.tokenizer) {
      if (spec.kind == "gpt2") {
        prepared.tokenizer = std::make_shared<data::BpeTokenizer>(data::BpeTokenizer::load_gpt2(
            (fs::path(spec.argument) / "encoder.json").string(), (fs::path(spec.argument) / "vocab.bpe").string()));
      } else {
        prepared.tokenizer = std::make_shared<data::BpeTokenizer>(data::BpeTokenizer::load(spec.argument));
      }
    }
    if (!cached) {
      data::TokenizeOptions options;
      options.inputs = {path};
      options.output_dir = cache;
      options.separator = separator;
      options.extensions = extensions;
      options.val_fraction = config.data.val_fraction;
      // One undivided file is one document: hold out its tail instead of whole documents.
      const bool single_document = separator.empty() && data::list_corpus_files({path}, extensions).size() == 1;
      options.val_split = single_document ? data::ValSplit::tail : data::ValSplit::documents;
      const data::BpeTokenizer& tok = *prepared.tokenizer;
      data::TokenizeSummary summary = data::tokenize_corpus(
          options, [&tok](std::string_view text) { return tok.encode(text); }, tok.eot_id(),
          static_cast<std::uint32_t>(tok.vocab_size()));
      log.info("data: {} documents, {} bytes -> {} train + {} val tokens in {}", summary.documents, summary.bytes,
               summary.train_tokens, summary.val_tokens, cache);
      std::ofstream(source_file) << source.str();
    }
    prepared.shard_dir = cache;
  }
  data::ShardSet train = data::ShardSet::open_split(prepared.shard_dir, "train", false);
  prepared.vocab_size = train.vocab_size();
  return prepared;
}

}  // namespace myriad::train
