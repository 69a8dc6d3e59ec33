// Corpus resolution, tokenizer loading/training and cached tokenization (see prepared_data.h).
#include "myriad/train/data/prepared_data.h"

#include "myriad/data/shard_manifest.h"

#include <filesystem>
#include <fstream>
#include <sstream>

#include "myriad/core/error.h"
#include "myriad/data/corpus_fingerprint.h"
#include "myriad/data/tokenize_corpus.h"
#include "myriad/core/progress_bar.h"
#include "myriad/data/token_shard.h"
#include "myriad/train/checkpoint/checkpoint_tokenizer.h"

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
    MYRIAD_CHECK(fs::is_directory(corpus.path), "data.path is empty, so the default corpus "
                                                    << corpus.path
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

data::ValSplit val_split_for(const RunConfig& config, const Corpus& corpus, std::size_t files) {
  const std::string& choice = config.data.val_split;
  if (choice == "auto") {
    // One undivided file is one document: hold out its tail instead of whole documents.
    const bool single_document = corpus.separator.empty() && files == 1;
    return single_document ? data::ValSplit::tail : data::ValSplit::documents;
  }
  return data::parse_val_split(choice);
}

// Tokenizes `files` of the corpus into `cache` with `tok`; throws saying what happened when the
// corpus yields no training or no validation tokens.
void tokenize_into(const Corpus& corpus, const std::vector<std::string>& files, const RunConfig& config,
                   const data::BpeTokenizer& tok, const std::string& cache, const data::AtRest& cache_at_rest,
                   spdlog::logger& log) {
  data::TokenizeOptions options;
  options.at_rest = cache_at_rest;
  options.inputs = {corpus.path};
  options.output_dir = cache;
  options.separator = corpus.separator;
  options.extensions = corpus.extensions;
  options.val_fraction = config.data.val_fraction;
  options.val_split = val_split_for(config, corpus, files.size());
  ProgressBar bar("tokenizing " + corpus.path, static_cast<std::int64_t>(files.size()), true);
  options.progress = [&bar](std::int64_t done, std::int64_t) { bar.update(done); };
  data::TokenizeSummary summary = data::tokenize_corpus(
      options, [&tok](std::string_view text) { return tok.encode(text); }, tok.eot_id(),
      static_cast<std::uint32_t>(tok.vocab_size()));
  bar.finish();
  log.info("data: {} documents, {} bytes -> {} train + {} val tokens in {}", summary.documents, summary.bytes,
           summary.train_tokens, summary.val_tokens, cache);
  MYRIAD_CHECK(summary.bytes > 0 && summary.train_tokens > 0,
               "data.path '" << corpus.path << "': the corpus holds no text (" << files.size() << " file(s), "
                             << summary.bytes << " bytes, " << summary.documents << " documents)");
  if (summary.val_tokens == 0) {
    const bool by_documents = options.val_split == data::ValSplit::documents;
    MYRIAD_THROW("data.path '" << corpus.path << "': no validation tokens: "
                               << (by_documents ? "no document went to validation (data.val_split documents holds out "
                                                  "every 1/data.val_fraction-th document, and the corpus has "
                                                : "the tail share is under one token (")
                               << summary.documents << " documents, " << summary.train_tokens
                               << " tokens; data.val_fraction " << config.data.val_fraction
                               << "): raise data.val_fraction, or set data.val_split: tail to hold out the last "
                                  "val_fraction of the tokens");
  }
}

PreparedData with_vocab_size(PreparedData prepared, const data::AtRest& at_rest) {
  prepared.vocab_size = data::ShardSet::open_split(prepared.shard_dir, "train", false, at_rest).vocab_size();
  return prepared;
}

// A shard folder given as data.path against its manifest.json (names, count, sizes): a shard
// missing, truncated or left over from another tokenize is refused before training reads a gapped
// corpus. (The run's own token cache is keyed by its source.txt instead.)
void check_against_manifest(const std::string& shard_dir, spdlog::logger& log, const data::AtRest& at_rest) {
  const data::ShardFolderCheck check = data::check_shard_folder(shard_dir, false, at_rest);
  if (!check.has_manifest) {
    log.warn(
        "data: {} has no manifest.json, so its shards cannot be checked for gaps (myriad-data tokenize "
        "writes one last; an interrupted tokenize leaves none)",
        shard_dir);
    return;
  }
  MYRIAD_CHECK(check.problems.empty(), "data: the shards in "
                                           << shard_dir << " disagree with their manifest.json:" << check.describe()
                                           << "\nre-run myriad-data tokenize into a new folder, "
                                              "or restore the shards");
}

}  // namespace

PreparedData prepare_data(const RunConfig& config, spdlog::logger& log, CacheUse use, const data::AtRest& at_rest) {
  if (!config.data.sources.empty()) {
    const std::string cache =
        config.data.cache_dir.empty() ? (fs::path(config.logging.dir) / "data").string() : config.data.cache_dir;
    const bool trained = config.data.tokenizer.empty() || config.data.tokenizer.rfind("train:", 0) == 0;
    PreparedData mixture;
    const std::vector<DataConfig::Source> list = config.data.source_list();
    for (std::size_t k = 0; k < list.size(); ++k) {
      MYRIAD_CHECK(!trained || has_shards(list[k].path, "train"),
                   "data.sources member "
                       << k << " ('" << list[k].path
                       << "') is a corpus to tokenize, but "
                          "data.tokenizer ('"
                       << config.data.tokenizer
                       << "') would train a separate vocabulary for each "
                          "source: use gpt2:<dir> or bpe:<file>, or give token shards (myriad-data tokenize)");
      RunConfig one = config;
      one.data.sources.clear();
      one.data.path = list[k].path;
      one.data.cache_dir = (fs::path(cache) / ("source_" + std::to_string(k))).string();
      PreparedData part = prepare_data(one, log, use, at_rest);
      MYRIAD_CHECK(k == 0 || part.vocab_size == mixture.vocab_size,
                   "data.sources: '" << list[k].path << "' has a vocabulary of " << part.vocab_size << " tokens, '"
                                     << list[0].path << "' one of " << mixture.vocab_size
                                     << "; a mixture needs one tokenizer");
      if (k == 0) {
        mixture.shard_dir = part.shard_dir;
        mixture.vocab_size = part.vocab_size;
      }
      if (!mixture.tokenizer) mixture.tokenizer = part.tokenizer;
      mixture.sources.push_back({list[k].path, list[k].weight, part.shard_dir});
    }
    return mixture;
  }
  PreparedData prepared;
  const Corpus corpus = resolve_corpus(config);
  const std::string spec_text =
      config.data.tokenizer.empty() ? "train:" + std::to_string(config.model.vocab_size) : config.data.tokenizer;
  const TokenizerSpec spec = parse_tokenizer_spec(spec_text);
  const bool trained = spec.kind == "train";
  // How the run's own token cache is written: encrypted under the run's keys when asked for.
  const data::AtRest cache_at_rest = config.security.encrypt_token_shards ? at_rest : data::AtRest();
  auto load = [&at_rest](std::string_view kind, const std::string& argument) {
    return std::make_shared<data::BpeTokenizer>(data::load_tokenizer(kind, argument, at_rest));
  };

  if (has_shards(corpus.path, "train")) {
    // Shards given directly: the tokenizer (for generation) is the spec's, or one saved beside them.
    // The keys that shape the run's own cache would not act on them: refused, naming each.
    const DataConfig defaults;
    std::string idle;
    auto add_idle = [&](bool set, const char* key) {
      if (set) idle += (idle.empty() ? "" : ", ") + std::string(key);
    };
    add_idle(config.data.val_fraction != defaults.val_fraction, "data.val_fraction");
    add_idle(config.data.val_split != defaults.val_split, "data.val_split");
    // (The config may be resolved: its cache_dir then reads <logging.dir>/data, the default.)
    add_idle(!config.data.cache_dir.empty() && fs::path(config.data.cache_dir) != fs::path(config.logging.dir) / "data",
             "data.cache_dir");
    add_idle(config.security.encrypt_token_shards, "security.encrypt_token_shards");
    MYRIAD_CHECK(idle.empty(), "data.path " << corpus.path << " holds token shards, used as they are (their own "
                                            << "train/val split, no cache, nothing re-encrypted): " << idle
                                            << " would not act; drop them, or point data.path at the text and "
                                               "let the run build its shards");
    prepared.shard_dir = corpus.path;
    check_against_manifest(prepared.shard_dir, log, at_rest);
    const fs::path beside = fs::path(corpus.path) / "tokenizer.bpe";
    if (!trained)
      prepared.tokenizer = load(spec.kind, spec.argument);
    else if (fs::exists(beside))
      prepared.tokenizer = load("bpe", beside.string());
  } else {
    const std::string cache =
        config.data.cache_dir.empty() ? (fs::path(config.logging.dir) / "data").string() : config.data.cache_dir;
    // source.txt is the cache's key, written last: a cache without it (an interrupted build) is
    // rebuilt, as is one whose key differs (another corpus, tokenizer or split, or changed files).
    const fs::path source_file = fs::path(cache) / "source.txt";
    const fs::path tokenizer_file = fs::path(cache) / "tokenizer.bpe";
    const bool complete = has_shards(cache, "train") && has_shards(cache, "val") && fs::exists(source_file) &&
                          (!trained || fs::exists(tokenizer_file));
    if (use == CacheUse::prepared_by_rank0 && complete) {  // rank 0 has just checked the key
      prepared.tokenizer = trained ? load("bpe", tokenizer_file.string()) : load(spec.kind, spec.argument);
      prepared.shard_dir = cache;
      return with_vocab_size(prepared, at_rest);
    }
    // A resuming run with a trained tokenizer keeps the tokenizer its checkpoint was trained with
    // (its ids are what the checkpoint's embeddings mean): a changed corpus is tokenized with it,
    // never given a new vocabulary. A checkpoint from before checkpoints kept their tokenizer: the
    // cache's existing one.
    std::shared_ptr<data::BpeTokenizer> kept;
    std::string kept_from, kept_fingerprint, kept_what;
    if (trained) {
      const std::string resumed = resume_checkpoint_dir(config);
      const fs::path saved = fs::path(resumed) / kCheckpointTokenizerFile;
      if (!resumed.empty() && fs::is_regular_file(saved)) {
        kept_from = saved.string();
        kept_what = "the tokenizer of the checkpoint's run";
      } else if (!resumed.empty() && fs::is_regular_file(fs::path(resumed) / "manifest.json") &&
                 fs::is_regular_file(tokenizer_file)) {
        kept_from = tokenizer_file.string();
        kept_what = "the cache's existing tokenizer (the checkpoint " + resumed + " records none)";
      }
      if (!kept_from.empty()) {
        try {
          kept = load("bpe", kept_from);
          kept_fingerprint = tokenizer_fingerprint(*kept);
        } catch (const Error& e) {  // the checkpoint load names the damage; here, train as before
          log.warn("data: the tokenizer {} of the checkpoint to resume cannot be read: {}", kept_from, e.message());
          kept.reset();
        }
      }
    }
    const std::vector<std::string> files = data::list_corpus_files({corpus.path}, corpus.extensions);
    std::string looked_for;
    for (const std::string& extension : corpus.extensions) looked_for += (looked_for.empty() ? "" : ", ") + extension;
    MYRIAD_CHECK(!files.empty(), "data.path '" << corpus.path << "' holds no corpus files"
                                               << (looked_for.empty() ? "" : " (looked for " + looked_for + ")")
                                               << ": point data.path at a text file, a folder of text or .jsonl(.zst) "
                                                  "files, or a folder of token shards (docs/data.md)");
    std::ostringstream source;
    source << "path=" << fs::absolute(corpus.path).string() << "\ntokenizer=" << spec_text
           << "\nval_fraction=" << config.data.val_fraction << "\nval_split=" << config.data.val_split
           << "\nseparator=" << corpus.separator << "\n"
           << (config.security.encrypt_token_shards ? "encrypted=true (security.encrypt_token_shards)\n" : "")
           << data::corpus_fingerprint(files);
    std::string key = source.str();
    const std::string before = fs::exists(source_file) ? read_text(source_file) : "";
    bool reuse = complete && before == key;
    if (kept) {
      // The cache built for this key holds the kept tokenizer's tokens only when its tokenizer is that one.
      if (reuse &&
          tokenizer_fingerprint(data::BpeTokenizer::load(tokenizer_file.string(), at_rest)) != kept_fingerprint)
        reuse = false;
      if (!reuse) {
        key += "kept_tokenizer=" + kept_fingerprint + "\n";
        reuse = complete && before == key;
      }
    }
    if (reuse) {
      log.info("data: reusing token shards in {}", cache);
      prepared.tokenizer = trained ? load("bpe", tokenizer_file.string()) : load(spec.kind, spec.argument);
    } else {
      if (!before.empty()) {
        const std::string changed = data::first_difference(before, key);
        log.warn("data: rebuilding the token cache in {}: {}", cache,
                 changed.empty() ? std::string("the tokenizer or split settings changed, or shards are missing")
                                 : "the corpus changed since it was built: " + changed);
      }
      fs::create_directories(cache);
      fs::remove(source_file);
      remove_shards(cache);
      if (kept) {
        log.info(
            "data: resuming: tokenizing {} with {}, {} ({} tokens, {}), instead of training a new one "
            "(data.tokenizer {})",
            corpus.path, kept_what, kept_from, kept->vocab_size(), kept_fingerprint, spec_text);
        prepared.tokenizer = kept;
        if (kept_from != tokenizer_file.string()) prepared.tokenizer->save(tokenizer_file.string(), cache_at_rest);
      } else if (trained) {
        const std::int32_t vocab = static_cast<std::int32_t>(std::stol(spec.argument));
        log.info("data: training a byte-level BPE of {} tokens on {}", vocab, corpus.path);
        std::string text = training_text(files, corpus.separator, 8u << 20);
        prepared.tokenizer = std::make_shared<data::BpeTokenizer>(data::BpeTokenizer::train(text, vocab));
        prepared.tokenizer->save(tokenizer_file.string(), cache_at_rest);
      } else {
        prepared.tokenizer = load(spec.kind, spec.argument);
      }
      tokenize_into(corpus, files, config, *prepared.tokenizer, cache, cache_at_rest, log);
      std::ofstream(source_file) << key;
    }
    prepared.shard_dir = cache;
  }
  return with_vocab_size(prepared, at_rest);
}

}  // namespace myriad::train
