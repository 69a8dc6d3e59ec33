// myriad_tokenize: text corpus -> train/val token shards (see include/myriad/data/tokenize_corpus.h).
//
//   myriad_tokenize --input PATH... --output DIR --tokenizer gpt2:<dir>|bpe:<file>|train:<vocab>|bytes
//                   [--val-fraction F] [--val-split documents|tail] [--separator LINE]
//                   [--ext .txt]... [--shard-tokens N]
//                   [--log-level info]
//
// gpt2:<dir> loads <dir>/encoder.json + <dir>/vocab.bpe; bpe:<file> loads a saved myriad BPE;
// train:<vocab> trains a BPE of that size on the corpus documents and saves it as
// <DIR>/tokenizer.bpe; bytes uses ids 0..255 for the raw bytes and 256 for end-of-text.
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "myriad/core/cli_numbers.h"
#include "myriad/core/error.h"
#include "myriad/core/logging.h"
#include "myriad/data/bpe_tokenizer.h"
#include "myriad/data/text_encoding.h"
#include "myriad/data/tokenize_corpus.h"

namespace {

using myriad::data::BpeTokenizer;

constexpr const char* kUsage =
    "usage: myriad_tokenize --input PATH... --output DIR --tokenizer gpt2:<dir>|bpe:<file>|train:<vocab>|bytes\n"
    "                       [--val-fraction F (0)] [--val-split documents|tail (documents)] [--separator LINE]\n"
    "                       [--ext .EXT (\"\" = no extension)]... [--shard-tokens N (1e8)]\n"
    "                       [--log-level trace|debug|info|warn|error]\n";

struct ToolArgs {
  myriad::data::TokenizeOptions options;
  std::string tokenizer;
  std::string log_level = "info";
};

bool is_flag(const std::string& arg) { return arg.size() > 2 && arg.rfind("--", 0) == 0; }

using myriad::tools::parse_double;
using myriad::tools::parse_int;

// Returns nullopt for --help.
std::optional<ToolArgs> parse_args(int argc, char** argv) {
  ToolArgs args;
  std::vector<std::string> list(argv + 1, argv + argc);
  for (std::size_t i = 0; i < list.size(); ++i) {
    const std::string& flag = list[i];
    if (flag == "--help" || flag == "-h") return std::nullopt;
    auto value = [&]() -> const std::string& {
      MYRIAD_CHECK(i + 1 < list.size(), flag << " needs a value\n" << kUsage);
      return list[++i];
    };
    if (flag == "--input") {
      while (i + 1 < list.size() && !is_flag(list[i + 1])) args.options.inputs.push_back(list[++i]);
      MYRIAD_CHECK(!args.options.inputs.empty(), "--input needs at least one path\n" << kUsage);
    } else if (flag == "--output") {
      args.options.output_dir = value();
    } else if (flag == "--tokenizer") {
      args.tokenizer = value();
    } else if (flag == "--val-fraction") {
      args.options.val_fraction = parse_double(flag, value());
    } else if (flag == "--val-split") {
      args.options.val_split = myriad::data::parse_val_split(value());
    } else if (flag == "--separator") {
      args.options.separator = value();
    } else if (flag == "--ext") {
      args.options.extensions.push_back(value());
    } else if (flag == "--shard-tokens") {
      args.options.shard_tokens = parse_int(flag, value());
    } else if (flag == "--log-level") {
      args.log_level = value();
    } else {
      MYRIAD_THROW("unknown argument '" << flag << "'\n" << kUsage);
    }
  }
  MYRIAD_CHECK(!args.options.inputs.empty(), "--input is required\n" << kUsage);
  MYRIAD_CHECK(!args.options.output_dir.empty(), "--output is required\n" << kUsage);
  MYRIAD_CHECK(!args.tokenizer.empty(), "--tokenizer is required\n" << kUsage);
  return args;
}

// The encoder, its end-of-text id and vocabulary size, built from the --tokenizer spec:
// gpt2:/bpe:/bytes as every data tool loads them (text_encoding.h); train: trains a BPE here.
myriad::data::TextEncoding make_encoding(const ToolArgs& args, spdlog::logger& log) {
  namespace fs = std::filesystem;
  const std::string& spec = args.tokenizer;
  if (spec.rfind("train:", 0) != 0) return myriad::data::load_text_encoding(spec);
  auto vocab = static_cast<std::int32_t>(parse_int("--tokenizer train:", spec.substr(6)));
  std::string corpus;
  myriad::data::for_each_document(myriad::data::list_corpus_files(args.options.inputs, args.options.extensions),
                                  args.options.separator, [&](std::string_view document) { corpus.append(document); });
  log.info("training a BPE with vocab size {} on {} bytes", vocab, corpus.size());
  auto start = std::chrono::steady_clock::now();
  auto bpe = std::make_shared<BpeTokenizer>(BpeTokenizer::train(corpus, vocab));
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  fs::create_directories(args.options.output_dir);
  std::string saved = (fs::path(args.options.output_dir) / "tokenizer.bpe").string();
  bpe->save(saved);
  log.info("trained in {:.1f} s, saved {}", seconds, saved);
  myriad::data::TextEncoding encoding;
  encoding.spec = spec;
  encoding.bpe = bpe;
  encoding.encode = [bpe](std::string_view text) { return bpe->encode(text); };
  encoding.eot_id = bpe->eot_id();
  encoding.vocab_size = static_cast<std::uint32_t>(bpe->vocab_size());
  return encoding;
}

int run(const ToolArgs& args, spdlog::logger& log) {
  const myriad::data::TextEncoding encoding = make_encoding(args, log);
  log.info("tokenizing {} input(s) into {} (vocab {}, eot {}, val fraction {}, shards of <= {} tokens)",
           args.options.inputs.size(), args.options.output_dir, encoding.vocab_size, encoding.eot_id,
           args.options.val_fraction, args.options.shard_tokens);
  auto start = std::chrono::steady_clock::now();
  myriad::data::TokenizeSummary summary =
      myriad::data::tokenize_corpus(args.options, encoding.encode, encoding.eot_id, encoding.vocab_size);
  double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::int64_t tokens = summary.train_tokens + summary.val_tokens;
  log.info("{} files, {} documents ({} val), {} bytes -> {} tokens ({:.2f} bytes/token) in {:.2f} s ({:.1f} MB/s)",
           summary.files, summary.documents, summary.val_documents, summary.bytes, tokens,
           tokens > 0 ? static_cast<double>(summary.bytes) / static_cast<double>(tokens) : 0.0, seconds,
           seconds > 0 ? static_cast<double>(summary.bytes) / seconds / 1e6 : 0.0);
  log.info("train: {} tokens in {} shard(s); val: {} tokens in {} shard(s)", summary.train_tokens,
           summary.train_shards.size(), summary.val_tokens, summary.val_shards.size());
  if (args.options.val_fraction > 0 && summary.val_tokens == 0)
    log.warn(
        "val fraction {} selected no document out of {}; the val split is empty (--val-split tail holds out "
        "the last tokens instead)",
        args.options.val_fraction, summary.documents);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  std::shared_ptr<spdlog::logger> log = myriad::make_rank_logger(0, "info");
  try {
    std::optional<ToolArgs> args = parse_args(argc, argv);
    if (!args) {
      std::fputs(kUsage, stdout);
      return 0;
    }
    log = myriad::make_rank_logger(0, args->log_level);
    return run(*args, *log);
  } catch (const myriad::Error& e) {
    log->error("{}", e.message());
    return 1;
  } catch (const std::exception& e) {
    log->error("{}", e.what());
    return 1;
  }
}
