// myriad.data: the myriad-data tools from Python — tokenize, dedup, mix and inspect — as the
// command runs them (the same library functions). With `groups` (a ProcessGroups) the call is
// collective over its world, as under mpirun; without, one process. Results are dicts.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include "bindings.h"
#include "myriad/data/dedup.h"
#include "myriad/data/mixture_plan.h"
#include "myriad/data/shard_corpus.h"
#include "myriad/data/token_reader.h"
#include "myriad/distributed/process_groups.h"
#include "myriad/train/data/communicator_workers.h"

namespace py = pybind11;

namespace myriad::python {

namespace {

py::dict report_dict(const data::InputReport& report) {
  py::dict d;
  d["files"] = report.files;
  d["documents"] = report.documents;
  d["document_bytes"] = report.document_bytes;
  d["input_bytes"] = report.input_bytes;
  d["empty_documents"] = report.empty_documents;
  py::dict problems;
  for (int kind = 0; kind < data::kInputProblemCount; ++kind) {
    const auto k = static_cast<std::size_t>(kind);
    if (report.problems[k] == 0) continue;
    py::dict entry;
    entry["count"] = report.problems[k];
    entry["examples"] = report.examples[k];
    problems[data::input_problem_name(static_cast<data::InputProblem>(kind))] = entry;
  }
  d["problems"] = problems;
  return d;
}

// Runs f(workers) without the GIL, on the groups' world or alone.
template <typename F>
auto with_workers(distributed::ProcessGroups* groups, F&& f) {
  py::gil_scoped_release release;
  if (groups != nullptr) {
    train::CommunicatorWorkers workers(groups->world());
    return f(workers);
  }
  data::SoloWorkers solo;
  return f(solo);
}

data::SourceOptions source_options(const std::string& text_field, const std::string& separator,
                                   std::int64_t max_document_bytes) {
  data::SourceOptions source;
  source.text_field = text_field;
  source.separator = separator;
  source.max_document_bytes = max_document_bytes;
  return source;
}

py::list shard_list(const std::vector<data::ShardInfo>& shards) {
  py::list out;
  for (const data::ShardInfo& s : shards) {
    py::dict d;
    d["path"] = s.path;
    d["tokens"] = s.tokens;
    d["bytes"] = s.bytes;
    d["crc32"] = s.crc32;
    out.append(d);
  }
  return out;
}

}  // namespace

void bind_data(py::module_& m) {
  m.def(
      "tokenize",
      [](const std::vector<std::string>& inputs, const std::string& output, const std::string& tokenizer,
         double val_fraction, const std::string& val_split, std::int64_t shard_tokens, bool compress,
         std::int64_t block_tokens, int level, const std::string& text_field, const std::string& separator,
         const std::vector<std::string>& extensions, std::int64_t max_document_bytes, bool encrypt,
         const std::string& key_file, distributed::ProcessGroups* groups) {
        data::ShardCorpusOptions options;
        if (encrypt) {
          options.at_rest = data::AtRest::from_key_file(key_file, "key_file");
          MYRIAD_CHECK(options.at_rest.encrypts(), "tokenize(encrypt=True) needs a key: key_file or $"
                                                       << data::kKeyFileVariable << " (myriad keys new FILE)");
        }
        options.inputs = inputs;
        options.output_dir = output;
        options.val_fraction = val_fraction;
        options.val_split = data::parse_val_split(val_split);
        options.shard_tokens = shard_tokens;
        if (compress) options.compression = data::ShardCompression{block_tokens, level};
        options.source = source_options(text_field, separator, max_document_bytes);
        options.extensions = extensions;
        const data::TextEncoding encoding = data::load_text_encoding(tokenizer);
        const data::ShardCorpusSummary s =
            with_workers(groups, [&](data::WorkerGroup& w) { return data::shard_corpus(options, encoding, w); });
        py::dict d;
        d["input"] = report_dict(s.report);
        d["train_documents"] = s.train_documents;
        d["val_documents"] = s.val_documents;
        d["train_tokens"] = s.train_tokens;
        d["val_tokens"] = s.val_tokens;
        d["train_shards"] = shard_list(s.train_shards);
        d["val_shards"] = shard_list(s.val_shards);
        d["manifest"] = s.manifest_path;
        return d;
      },
      py::arg("inputs"), py::arg("output"), py::arg("tokenizer"), py::arg("val_fraction") = 0.0,
      py::arg("val_split") = "documents", py::arg("shard_tokens") = 100'000'000, py::arg("compress") = false,
      py::arg("block_tokens") = 131072, py::arg("level") = 19, py::arg("text_field") = "text",
      py::arg("separator") = "", py::arg("extensions") = std::vector<std::string>{},
      py::arg("max_document_bytes") = std::int64_t{64} << 20, py::arg("encrypt") = false, py::arg("key_file") = "",
      py::arg("groups") = nullptr,
      "myriad-data tokenize: corpus files -> train/val token shards and manifest.json, the same bytes for any "
      "number of ranks and threads (docs/data.md); encrypt=True writes them encrypted under key_file's (else "
      "$MYRIAD_KEY_FILE's) current key");

  m.def(
      "dedup",
      [](const std::vector<std::string>& inputs, const std::string& output, int num_perm, int bands, int rows,
         int ngram, bool char_ngrams, double threshold, std::uint64_t seed, int examples, const std::string& text_field,
         const std::string& separator, const std::vector<std::string>& extensions, distributed::ProcessGroups* groups) {
        data::DedupOptions options;
        options.inputs = inputs;
        options.output_dir = output;
        options.minhash = {num_perm, bands, rows, ngram, char_ngrams, seed};
        options.threshold = threshold;
        options.examples = examples;
        options.source = source_options(text_field, separator, std::int64_t{64} << 20);
        options.extensions = extensions;
        const data::DedupSummary s =
            with_workers(groups, [&](data::WorkerGroup& w) { return data::dedup_corpus(options, w); });
        py::dict d;
        d["input"] = report_dict(s.report);
        d["documents_in"] = s.documents_in;
        d["documents_out"] = s.documents_out;
        d["exact_duplicates"] = s.exact_duplicates;
        d["near_duplicates"] = s.near_duplicates;
        d["clusters"] = s.clusters;
        d["candidate_pairs"] = s.candidate_pairs;
        d["verified_pairs"] = s.verified_pairs;
        d["kept"] = s.kept;
        py::list pairs;
        for (const data::DuplicatePair& p : s.examples) pairs.append(py::make_tuple(p.kept, p.dropped, p.jaccard));
        d["examples"] = pairs;
        d["report"] = s.report_path;
        d["removed"] = s.removed_path;
        return d;
      },
      py::arg("inputs"), py::arg("output") = "", py::arg("num_perm") = 512, py::arg("bands") = 20, py::arg("rows") = 6,
      py::arg("ngram") = 5, py::arg("char_ngrams") = false, py::arg("threshold") = 0.8, py::arg("seed") = 1,
      py::arg("examples") = 5, py::arg("text_field") = "text", py::arg("separator") = "",
      py::arg("extensions") = std::vector<std::string>{}, py::arg("groups") = nullptr,
      "myriad-data dedup: exact and MinHash-LSH near duplicates removed, the first of each cluster kept; "
      "'kept' is per document in corpus order");

  m.def(
      "mix",
      [](const std::vector<std::pair<std::string, double>>& sources, std::int64_t steps, std::int64_t batch,
         std::int64_t seq_len, std::uint64_t seed, const std::string& key_file) {
        const data::AtRest at_rest = data::AtRest::from_key_file(key_file, "key_file");
        std::vector<std::string> paths;
        std::vector<double> weights;
        for (const auto& [path, weight] : sources) {
          paths.push_back(path);
          weights.push_back(weight);
        }
        data::MixturePlan plan;
        {
          py::gil_scoped_release release;
          plan = data::plan_mixture(paths, weights, steps, batch, seq_len, seed, at_rest);
        }
        py::list list;
        for (const data::MixtureSourcePlan& s : plan.sources) {
          py::dict d;
          d["path"] = s.path;
          d["weight"] = s.weight;
          d["stream_tokens"] = s.stream_tokens;
          d["drawn_tokens"] = s.drawn_tokens;
          d["share"] = s.share;
          d["epochs"] = s.epochs;
          list.append(d);
        }
        py::dict d;
        d["sources"] = list;
        d["vocab_size"] = plan.vocab_size;
        d["run_tokens"] = plan.run_tokens;
        d["exact"] = plan.exact;
        d["yaml"] = plan.yaml;
        return d;
      },
      py::arg("sources"), py::arg("steps"), py::arg("batch"), py::arg("seq_len"), py::arg("seed") = 1337,
      py::arg("key_file") = "",
      "myriad-data mix: a data.sources mixture of shard folders checked, with the tokens a run of `steps` x "
      "`batch` sequences of `seq_len` draws from each source");

  m.def(
      "inspect",
      [](const std::string& path, bool verify, const std::string& key_file) {
        // An encrypted shard is read with the keys of key_file, else of $MYRIAD_KEY_FILE.
        const std::unique_ptr<data::TokenReader> reader =
            data::open_token_reader(path, verify, data::AtRest::from_key_file(key_file, "key_file"));
        py::dict d;
        d["path"] = reader->path();
        d["format"] = reader->format();
        d["tokens"] = reader->size();
        d["bytes"] = reader->file_bytes();
        d["vocab_size"] = reader->vocab_size();
        d["encrypted"] = reader->encrypted();
        return d;
      },
      py::arg("path"), py::arg("verify") = false, py::arg("key_file") = "",
      "one token shard (plain or block-compressed, in clear or encrypted): format and sizes");
}

}  // namespace myriad::python
