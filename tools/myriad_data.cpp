// myriad-data: the pre-training data tools, one command with subcommands.
//
//   myriad-data tokenize --input PATH... --output DIR --tokenizer gpt2:<dir>|bpe:<file>|bytes
//                        [--ext .EXT]... [--text-field text] [--separator LINE]
//                        [--val-fraction F] [--val-split documents|tail] [--shard-tokens N]
//                        [--compress] [--block-tokens N] [--level L] [--max-document-mb M] [--batch-mb B]
//   myriad-data dedup --input PATH... [--output DIR] [--ext .EXT]... [--text-field text] [--separator LINE]
//                     [--num-perm 512] [--bands 20] [--rows 6] [--ngram 5] [--char-ngrams] [--threshold 0.8]
//                     [--seed 1] [--examples 5]
//   myriad-data mix --source DIR@WEIGHT... --steps N --batch B --seq-len T [--seed S]
//   myriad-data inspect PATH [--verify [--plain]]   (--verify: the folder against its manifest.json too)
//
// tokenize runs on every rank of an mpirun (or alone) and writes the same shards whatever the
// number of ranks and threads (include/myriad/data/shard_corpus.h); dedup removes exact and
// near duplicates with the same result for any number of ranks and threads
// (include/myriad/data/dedup.h; --output DIR gets the kept documents with their JSON records
// whole, dedup_removed.jsonl naming each removed document and the kept one it duplicates, and
// dedup_report.json); mix checks a data.sources mixture of shard folders and shows the
// tokens a run draws from each (include/myriad/data/mixture_plan.h); inspect describes a shard or
// a folder of shards (and its manifest.json). A failure on one rank ends the job on every rank.
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "myriad/core/cli_numbers.h"
#include "myriad/core/error.h"
#include "myriad/data/audit_log.h"
#include "myriad/data/compressed_shard.h"
#include "myriad/data/dedup.h"
#include "myriad/data/mixture_plan.h"
#include "myriad/data/shard_corpus.h"
#include "myriad/data/shard_manifest.h"
#include "myriad/data/token_reader.h"
#include "myriad/distributed/mpi_runtime.h"
#include "myriad/train/data/communicator_workers.h"

namespace {

// fn(), recording `action` on `target` with result "error" (the message's first line) when it throws.
template <typename Fn>
auto audited(myriad::data::AuditLog* audit, const std::string& action, const std::string& target, Fn&& fn) {
  try {
    return fn();
  } catch (const std::exception& e) {
    if (audit != nullptr) {
      const std::string what = e.what();
      audit->append(action, target, "error", {{"error", what.substr(0, what.find('\n'))}});
    }
    throw;
  }
}

namespace fs = std::filesystem;
using namespace myriad;

constexpr const char* kUsage =
    "usage: myriad-data tokenize --input PATH... --output DIR --tokenizer gpt2:<dir>|bpe:<file>|bytes\n"
    "                            [--ext .EXT]... [--text-field NAME (text)] [--separator LINE]\n"
    "                            [--val-fraction F (0)] [--val-split documents|tail] [--shard-tokens N (1e8)]\n"
    "                            [--compress] [--block-tokens N (131072)] [--level L (19)]\n"
    "                            [--max-document-mb M (64)] [--batch-mb B (32)] [--encrypt] [--key-file FILE]\n"
    "       myriad-data dedup --input PATH... [--output DIR] [--ext .EXT]... [--text-field NAME] [--separator LINE]\n"
    "                         [--num-perm N (512)] [--bands B (20)] [--rows R (6)] [--ngram N (5)] [--char-ngrams]\n"
    "                         [--threshold J (0.8)] [--seed S (1)] [--examples K (5)] [--max-document-mb M (64)]\n"
    "       myriad-data mix --source DIR[@WEIGHT]... --steps N --batch B --seq-len T [--seed S (1337)]\n"
    "                       [--key-file FILE]\n"
    "       myriad-data inspect PATH [--verify [--plain]] [--key-file FILE]\n"
    "Encrypted shards (tokenize --encrypt) are written and read with the keys of --key-file, else of the\n"
    "file $MYRIAD_KEY_FILE names (docs/security.md).\n";

using myriad::tools::parse_double;
using myriad::tools::parse_int;

// The value of the flag args[i] (i moves to it); an error naming the flag when there is none.
const std::string& flag_value(const std::vector<std::string>& args, std::size_t& i) {
  MYRIAD_CHECK(i + 1 < args.size(), args[i] << " needs a value\n" << kUsage);
  return args[++i];
}

// The arguments after args[i] up to the next flag (a flag's further values), appended to `out`.
void take_more(const std::vector<std::string>& args, std::size_t& i, std::vector<std::string>& out) {
  while (i + 1 < args.size() && args[i + 1].rfind("--", 0) != 0) out.push_back(args[++i]);
}

std::string mb(double bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.1f MB", bytes / 1e6);
  return text;
}

// The flags tokenize and dedup share (inputs, output, folder filter, document reading); returns
// whether args[i] was one of them (i then at its last value).
bool corpus_flag(const std::vector<std::string>& args, std::size_t& i, std::vector<std::string>& inputs,
                 std::vector<std::string>& extensions, data::SourceOptions& source, std::string& output) {
  const std::string& flag = args[i];
  auto value = [&]() -> const std::string& { return flag_value(args, i); };
  if (flag == "--input") {
    inputs.push_back(value());
    take_more(args, i, inputs);
  } else if (flag == "--output") {
    output = value();
  } else if (flag == "--ext") {
    extensions.push_back(value());
  } else if (flag == "--text-field") {
    source.text_field = value();
  } else if (flag == "--separator") {
    source.separator = value();
  } else if (flag == "--max-document-mb") {
    source.max_document_bytes = static_cast<std::int64_t>(parse_double(flag, value()) * 1e6);
  } else {
    return false;
  }
  return true;
}

// Rank 0's progress line on a terminal: "[stage] rank 0:  42.0% of 12.3 MB, 5.1 MB/s".
std::function<void(std::int64_t, std::int64_t)> progress_bar(const char* stage,
                                                             std::chrono::steady_clock::time_point start) {
  return [stage, start](std::int64_t done, std::int64_t total) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    std::fprintf(stderr, "\r[%s] rank 0: %5.1f%% of %s, %.1f MB/s   ", stage,
                 total > 0 ? 100.0 * static_cast<double>(done) / static_cast<double>(total) : 100.0,
                 mb(static_cast<double>(total)).c_str(), s > 0 ? static_cast<double>(done) / s / 1e6 : 0.0);
  };
}

int tokenize(const std::vector<std::string>& args, distributed::Communicator& world) {
  data::ShardCorpusOptions options;
  std::string tokenizer;
  bool compress = false, encrypt = false;
  std::string key_file;
  data::ShardCompression compression;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (corpus_flag(args, i, options.inputs, options.extensions, options.source, options.output_dir)) continue;
    const std::string& flag = args[i];
    auto value = [&]() -> const std::string& { return flag_value(args, i); };
    if (flag == "--tokenizer") {
      tokenizer = value();
    } else if (flag == "--val-fraction") {
      options.val_fraction = parse_double(flag, value());
    } else if (flag == "--val-split") {
      options.val_split = data::parse_val_split(value());
    } else if (flag == "--shard-tokens") {
      options.shard_tokens = parse_int(flag, value());
    } else if (flag == "--compress") {
      compress = true;
    } else if (flag == "--block-tokens") {
      compression.block_tokens = parse_int(flag, value());
      compress = true;
    } else if (flag == "--level") {
      compression.level = static_cast<int>(parse_int(flag, value()));
      compress = true;
    } else if (flag == "--batch-mb") {
      options.batch_bytes = static_cast<std::int64_t>(parse_double(flag, value()) * 1e6);
    } else if (flag == "--encrypt") {
      encrypt = true;
    } else if (flag == "--key-file") {
      key_file = value();
    } else {
      MYRIAD_THROW("tokenize: unknown argument '" << flag << "'\n" << kUsage);
    }
  }
  MYRIAD_CHECK(!options.inputs.empty() && !options.output_dir.empty() && !tokenizer.empty(),
               "tokenize needs --input, --output and --tokenizer\n"
                   << kUsage);
  if (compress) options.compression = compression;
  if (encrypt) {
    options.at_rest = data::AtRest::from_key_file(key_file, "--key-file");
    MYRIAD_CHECK(options.at_rest.encrypts(), "tokenize --encrypt needs a key: --key-file FILE or $"
                                                 << data::kKeyFileVariable << " (myriad keys new FILE makes one)");
  }
  const data::TextEncoding encoding = data::load_text_encoding(tokenizer);
  const bool bar = world.rank() == 0 && ::isatty(STDERR_FILENO);
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  if (bar) {
    options.progress = progress_bar("tokenize", start);
  }
  // Rank 0 records the output (docs/security.md); a key or log it cannot use stops the job first.
  std::unique_ptr<data::AuditLog> audit = world.rank() == 0 ? data::open_audit_log_near(options.output_dir) : nullptr;
  train::CommunicatorWorkers workers(world);
  const data::ShardCorpusSummary summary = audited(audit.get(), "data.tokenized", options.output_dir,
                                                   [&] { return data::shard_corpus(options, encoding, workers); });
  if (bar) std::fprintf(stderr, "\n");
  if (audit) {
    audit->append("data.tokenized", options.output_dir, "ok",
                  {{"manifest_sha256", data::file_sha256(summary.manifest_path)},
                   {"inputs", static_cast<std::int64_t>(options.inputs.size())},
                   {"tokenizer", tokenizer},
                   {"train_tokens", summary.train_tokens},
                   {"val_tokens", summary.val_tokens},
                   {"shards", static_cast<std::int64_t>(summary.train_shards.size() + summary.val_shards.size())}});
  }
  if (world.rank() == 0) {
    const data::InputReport& r = summary.report;
    const double s = seconds();
    std::cout << "tokenize: " << r.files << " files, " << r.documents << " documents, "
              << mb(static_cast<double>(r.document_bytes)) << " of text in " << s << " s ("
              << static_cast<double>(r.document_bytes) / s / 1e6 << " MB/s on " << world.size() << " rank(s))\n"
              << "  train: " << summary.train_documents << " documents, " << summary.train_tokens << " tokens, "
              << summary.train_shards.size() << " shard(s)\n"
              << "  val:   " << summary.val_documents << " documents, " << summary.val_tokens << " tokens, "
              << summary.val_shards.size() << " shard(s)\n"
              << "  skipped: " << r.problem_count() << " problem(s), " << r.empty_documents << " empty document(s)\n";
    const std::string problems = r.describe_problems();
    if (!problems.empty()) std::cout << "  " << problems;
    if (summary.val_tokens == 0) {
      std::cout << "  note: no val split (--val-fraction " << options.val_fraction
                << "): training on this folder needs val_*.bin shards; set --val-fraction (e.g. 0.005)\n";
    }
    std::cout << "  manifest: " << summary.manifest_path << "\n";
  }
  return 0;
}

int dedup(const std::vector<std::string>& args, distributed::Communicator& world) {
  data::DedupOptions options;
  for (std::size_t i = 0; i < args.size(); ++i) {
    if (corpus_flag(args, i, options.inputs, options.extensions, options.source, options.output_dir)) continue;
    const std::string& flag = args[i];
    auto value = [&]() -> const std::string& { return flag_value(args, i); };
    if (flag == "--num-perm") {
      options.minhash.num_perm = static_cast<int>(parse_int(flag, value()));
    } else if (flag == "--bands") {
      options.minhash.bands = static_cast<int>(parse_int(flag, value()));
    } else if (flag == "--rows") {
      options.minhash.rows = static_cast<int>(parse_int(flag, value()));
    } else if (flag == "--ngram") {
      options.minhash.ngram = static_cast<int>(parse_int(flag, value()));
    } else if (flag == "--char-ngrams") {
      options.minhash.char_ngrams = true;
    } else if (flag == "--threshold") {
      options.threshold = parse_double(flag, value());
    } else if (flag == "--seed") {
      options.minhash.seed = static_cast<std::uint64_t>(parse_int(flag, value()));
    } else if (flag == "--examples") {
      options.examples = static_cast<int>(parse_int(flag, value()));
    } else {
      MYRIAD_THROW("dedup: unknown argument '" << flag << "'\n" << kUsage);
    }
  }
  MYRIAD_CHECK(!options.inputs.empty(), "dedup needs --input\n" << kUsage);
  const bool bar = world.rank() == 0 && ::isatty(STDERR_FILENO);
  const auto start = std::chrono::steady_clock::now();
  auto seconds = [&] { return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count(); };
  if (bar) {
    options.progress = progress_bar("dedup", start);
  }
  const std::string target = options.output_dir.empty() ? options.inputs.front() : options.output_dir;
  std::unique_ptr<data::AuditLog> audit = world.rank() == 0 ? data::open_audit_log_near(target) : nullptr;
  train::CommunicatorWorkers workers(world);
  const data::DedupSummary summary =
      audited(audit.get(), "data.deduplicated", target, [&] { return data::dedup_corpus(options, workers); });
  if (bar) std::fprintf(stderr, "\n");
  if (audit) {
    nlohmann::json details = {{"documents_in", summary.documents_in},
                              {"documents_out", summary.documents_out},
                              {"exact_duplicates", summary.exact_duplicates},
                              {"near_duplicates", summary.near_duplicates},
                              {"output", options.output_dir.empty() ? nullptr : nlohmann::json(options.output_dir)}};
    if (!summary.report_path.empty()) details["report_sha256"] = data::file_sha256(summary.report_path);
    audit->append("data.deduplicated", target, "ok", details);
  }
  if (world.rank() == 0) {
    const double s = seconds();
    std::cout << "dedup: " << summary.documents_in << " documents in, " << summary.documents_out << " out ("
              << summary.exact_duplicates << " exact and " << summary.near_duplicates << " near duplicates dropped"
              << (summary.removed_path.empty() ? "" : ", listed in " + summary.removed_path) << ", " << summary.clusters
              << " clusters), " << mb(static_cast<double>(summary.report.document_bytes)) << " of text in " << s
              << " s on " << world.size() << " rank(s)\n"
              << "  candidate pairs " << summary.candidate_pairs << ", verified " << summary.verified_pairs
              << " (estimated Jaccard >= " << options.threshold << ")\n";
    for (const data::DuplicatePair& pair : summary.examples) {
      std::cout << "  e.g. " << pair.dropped << " ~ " << pair.kept << " (J ~ " << pair.jaccard << ")\n";
    }
    std::cout << "  skipped input: " << summary.report.problem_count() << "\n";
    const std::string problems = summary.report.describe_problems();
    if (!problems.empty()) std::cout << "  " << problems;
    if (!summary.report_path.empty()) std::cout << "  report: " << summary.report_path << "\n";
  }
  return 0;
}

int mix(const std::vector<std::string>& args) {
  std::vector<std::string> paths;
  std::vector<double> weights;
  std::int64_t steps = 0, batch = 0, seq_len = 0;
  std::uint64_t seed = 1337;
  std::string key_file;
  for (std::size_t i = 0; i < args.size(); ++i) {
    const std::string& flag = args[i];
    auto value = [&]() -> const std::string& { return flag_value(args, i); };
    if (flag == "--source") {
      std::vector<std::string> members = {value()};
      take_more(args, i, members);
      for (const std::string& member : members) {
        const std::size_t at = member.rfind('@');
        paths.push_back(at == std::string::npos ? member : member.substr(0, at));
        weights.push_back(at == std::string::npos ? 1.0 : parse_double("--source weight", member.substr(at + 1)));
      }
    } else if (flag == "--steps") {
      steps = parse_int(flag, value());
    } else if (flag == "--batch") {
      batch = parse_int(flag, value());
    } else if (flag == "--seq-len") {
      seq_len = parse_int(flag, value());
    } else if (flag == "--seed") {
      seed = static_cast<std::uint64_t>(parse_int(flag, value()));
    } else if (flag == "--key-file") {
      key_file = value();
    } else {
      MYRIAD_THROW("mix: unknown argument '" << flag << "'\n" << kUsage);
    }
  }
  MYRIAD_CHECK(!paths.empty() && steps > 0 && batch > 0 && seq_len > 0,
               "mix needs --source, --steps, --batch (sequences per step) and --seq-len\n"
                   << kUsage);
  const data::MixturePlan plan = data::plan_mixture(paths, weights, steps, batch, seq_len, seed,
                                                    data::AtRest::from_key_file(key_file, "--key-file"));
  std::cout << "mix: " << steps << " steps x " << batch << " sequences x " << seq_len << " tokens = " << plan.run_tokens
            << " tokens (vocab " << plan.vocab_size << "; "
            << (plan.exact ? "every sample's source drawn as training will" : "expected from the weights") << ")\n\n"
            << "| source | weight | train tokens | drawn tokens | share | epochs |\n|---|---|---|---|---|---|\n";
  for (const data::MixtureSourcePlan& source : plan.sources) {
    std::cout << "| " << source.path << " | " << source.weight << " | " << source.stream_tokens << " | "
              << source.drawn_tokens << " | " << source.share << " | " << source.epochs << " |\n";
  }
  std::cout << "\n" << plan.yaml;
  return 0;
}

int inspect(const std::vector<std::string>& args) {
  MYRIAD_CHECK(!args.empty(), "inspect needs a PATH\n" << kUsage);
  const std::string& path = args[0];
  bool verify = false, plain = false;
  std::string key_file;
  for (std::size_t i = 1; i < args.size(); ++i) {
    if (args[i] == "--key-file") {
      key_file = flag_value(args, i);
      continue;
    }
    MYRIAD_CHECK(args[i] == "--verify" || args[i] == "--plain", "inspect: unknown argument '" << args[i] << "'\n"
                                                                                              << kUsage);
    (args[i] == "--verify" ? verify : plain) = true;
  }
  const data::AtRest at_rest = data::AtRest::from_key_file(key_file, "--key-file");
  if (verify && fs::is_directory(path)) {
    // The folder against its manifest first: a missing, extra, short or corrupt shard fails here.
    const data::ShardFolderCheck check = data::check_shard_folder(path, true, at_rest);
    MYRIAD_CHECK(check.has_manifest || plain,
                 "inspect --verify: '" << path << "' has no manifest.json, so a missing shard cannot be told "
                                       << "(an interrupted tokenize leaves such a folder); pass --plain to verify "
                                          "each shard of a folder you know is whole");
    MYRIAD_CHECK(check.problems.empty(),
                 "inspect --verify: '" << path << "' disagrees with its manifest.json:" << check.describe());
  }
  std::vector<std::string> files;
  if (fs::is_directory(path)) {
    for (const fs::directory_entry& entry : fs::directory_iterator(path)) {
      if (entry.path().extension() == ".bin") files.push_back(entry.path().string());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  MYRIAD_CHECK(!files.empty(), "inspect: no *.bin token shards in '" << path << "'");
  std::int64_t tokens = 0, bytes = 0;
  std::cout << "| shard | format | tokens | bytes | bytes/token |\n|---|---|---|---|---|\n";
  for (const std::string& file : files) {
    const std::unique_ptr<data::TokenReader> reader = data::open_token_reader(file, verify, at_rest);
    tokens += reader->size();
    bytes += reader->file_bytes();
    std::cout << "| " << fs::path(file).filename().string() << " | " << reader->format()
              << (reader->encrypted() ? ", encrypted" : "") << " | " << reader->size() << " | " << reader->file_bytes()
              << " | "
              << (reader->size() > 0 ? static_cast<double>(reader->file_bytes()) / static_cast<double>(reader->size())
                                     : 0.0)
              << " |\n";
  }
  std::cout << "\n"
            << files.size() << " shard(s), " << tokens << " tokens, " << bytes << " bytes"
            << (verify ? " (every shard verified)" : "") << "\n";
  const fs::path manifest = fs::is_directory(path) ? fs::path(path) / "manifest.json" : fs::path();
  if (!manifest.empty() && fs::exists(manifest)) {
    const nlohmann::json m = nlohmann::json::parse(std::ifstream(manifest));
    const nlohmann::json& totals = m.at("totals");
    std::cout << "manifest: tokenizer " << m.at("tokenizer").at("spec").get<std::string>() << " (vocab "
              << m.at("tokenizer").at("vocab_size") << "); " << totals.at("files") << " source file(s), "
              << totals.at("documents") << " documents, " << totals.at("document_bytes") << " text bytes ("
              << (tokens > 0 ? totals.at("document_bytes").get<double>() / static_cast<double>(bytes) : 0.0)
              << "x the shards' bytes)\n";
    for (const auto& [kind, entry] : totals.at("problems").items()) {
      std::cout << "  skipped " << kind << ": " << entry.at("count") << "\n";
    }
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  distributed::MpiRuntime runtime(&argc, &argv);
  std::unique_ptr<distributed::Communicator> world = runtime.world();
  const std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "--help" || args[0] == "-h") {
    if (world->rank() == 0) std::cout << kUsage;
    return args.empty() ? 2 : 0;
  }
  const std::vector<std::string> rest(args.begin() + 1, args.end());
  // `myriad-data SUBCOMMAND --help` anywhere in its arguments: the usage, exit 0 (not a parse error,
  // not a path named "--help").
  if (std::find(rest.begin(), rest.end(), "--help") != rest.end() ||
      std::find(rest.begin(), rest.end(), "-h") != rest.end()) {
    if (world->rank() == 0) std::cout << kUsage;
    return 0;
  }
  try {
    if (args[0] == "tokenize") return tokenize(rest, *world);
    if (args[0] == "dedup") return dedup(rest, *world);
    if (args[0] == "mix") return world->rank() == 0 ? mix(rest) : 0;
    if (args[0] == "inspect") return world->rank() == 0 ? inspect(rest) : 0;
    MYRIAD_THROW("unknown subcommand '" << args[0] << "' (tokenize, dedup, mix, inspect)\n" << kUsage);
  } catch (const std::exception& e) {
    const auto* error = dynamic_cast<const Error*>(&e);
    const std::string message = "myriad-data " + args[0] + ": [rank " + std::to_string(world->rank()) + "] " +
                                (error != nullptr ? error->message() : std::string(e.what()));
    std::cerr << message << std::endl;
    if (world->size() > 1) world->abort(1, message);
    return 1;
  }
}
