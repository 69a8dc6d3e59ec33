// Near-duplicate removal over workers: hash and sign, route keys to owners, star pairs, verify,
// union-find, write the kept documents (see dedup.h).
#include "myriad/data/dedup.h"

#include <algorithm>
#include <cstring>
#include <deque>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <numeric>
#include <type_traits>
#include <unordered_map>

#include "dedup_output.h"
#include "document_batches.h"
#include "file_assignment.h"
#include "report_json.h"
#include "myriad/core/error.h"
#include "myriad/data/tokenize_corpus.h"
#include "fnv1a.h"

namespace myriad::data {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

template <typename T>
std::string pack(const std::vector<T>& values) {
  static_assert(std::is_trivially_copyable_v<T>);
  return std::string(reinterpret_cast<const char*>(values.data()), values.size() * sizeof(T));
}

template <typename T>
std::vector<T> unpack(const std::string& bytes) {
  std::vector<T> values(bytes.size() / sizeof(T));
  if (!values.empty()) std::memcpy(values.data(), bytes.data(), values.size() * sizeof(T));  // data() may be null
  return values;
}

struct KeyEntry {  // a content hash or band key, with the document it came from
  std::uint64_t key, key2;
  std::int64_t document;
};

struct Pair {
  std::int64_t a, b;  // a < b
  bool operator<(const Pair& o) const { return a != o.a ? a < o.a : b < o.b; }
  bool operator==(const Pair& o) const { return a == o.a && b == o.b; }
};

struct VerifiedPair {
  std::int64_t a, b;
  double jaccard;
  std::int64_t exact;  // 1 for equal content hashes
};

// Sorts the entries and pairs each member of a run of equal keys with the run's first document.
std::vector<Pair> star_pairs(std::vector<KeyEntry>& entries) {
  std::sort(entries.begin(), entries.end(), [](const KeyEntry& x, const KeyEntry& y) {
    if (x.key != y.key) return x.key < y.key;
    if (x.key2 != y.key2) return x.key2 < y.key2;
    return x.document < y.document;
  });
  std::vector<Pair> pairs;
  for (std::size_t i = 0; i < entries.size();) {
    std::size_t j = i + 1;
    while (j < entries.size() && entries[j].key == entries[i].key && entries[j].key2 == entries[i].key2) {
      if (entries[j].document != entries[i].document) pairs.push_back({entries[i].document, entries[j].document});
      ++j;
    }
    i = j;
  }
  return pairs;
}

std::int64_t find_root(std::vector<std::int64_t>& parent, std::int64_t x) {
  while (parent[static_cast<std::size_t>(x)] != x) {
    parent[static_cast<std::size_t>(x)] = parent[static_cast<std::size_t>(parent[static_cast<std::size_t>(x)])];
    x = parent[static_cast<std::size_t>(x)];
  }
  return x;
}

}  // namespace

DedupSummary dedup_corpus(const DedupOptions& options, WorkerGroup& workers) {
  options.minhash.validate();
  MYRIAD_CHECK(options.threshold > 0.0 && options.threshold <= 1.0,
               "threshold " << options.threshold << " must lie in (0, 1]");
  const int rank = workers.rank(), size = workers.size();
  const std::vector<std::string> files = list_corpus_files(options.inputs, options.extensions);
  MYRIAD_CHECK(!files.empty(), "the inputs hold no files");
  const std::vector<int> owner = detail::assign_files(files, size);
  const MinHasher hasher(options.minhash);
  const int perms = options.minhash.num_perm;

  // 1. Read, hash and sign this worker's documents (file, index in file, line kept per document).
  struct Local {
    std::int64_t file, index, line;
    std::uint64_t hash1, hash2;
  };
  std::vector<Local> local;
  std::vector<std::uint32_t> signatures;  // perms per local document
  std::vector<std::int64_t> my_counts;    // per own file: f, documents
  InputReport report;
  std::int64_t my_bytes = 0, done_bytes = 0;
  for (std::size_t f = 0; f < files.size(); ++f) {
    std::error_code error;
    if (owner[f] == rank) my_bytes += static_cast<std::int64_t>(fs::file_size(files[f], error));
  }
  for (std::size_t f = 0; f < files.size(); ++f) {
    if (owner[f] != rank) continue;
    std::int64_t index = 0;
    detail::for_each_document_batch(
        files[f], options.source, report, options.batch_bytes,
        [&](const std::deque<std::string>& texts, const std::vector<std::int64_t>& lines) {
          const auto n = static_cast<std::int64_t>(texts.size());
          const std::size_t base = local.size();
          local.resize(base + texts.size());
          signatures.resize(local.size() * static_cast<std::size_t>(perms));
#pragma omp parallel for schedule(dynamic, 1)
          for (std::int64_t i = 0; i < n; ++i) {
            const std::string& text = texts[static_cast<std::size_t>(i)];
            local[base + static_cast<std::size_t>(i)] =
                Local{static_cast<std::int64_t>(f), index + i, lines[static_cast<std::size_t>(i)],
                      fnv1a(text, 0xcbf29ce484222325ull), fnv1a(text, 0x84222325cbf29ce4ull)};
            const std::vector<std::uint32_t> sig = hasher.signature(text);
            std::copy(sig.begin(), sig.end(), signatures.begin() + static_cast<std::ptrdiff_t>((base + i) * perms));
          }
          index += n;
        },
        [&](std::int64_t bytes) {
          done_bytes += bytes;
          if (options.progress) options.progress(done_bytes, my_bytes);
        });
    my_counts.insert(my_counts.end(), {static_cast<std::int64_t>(f), index});
  }

  // 2. Global indices: documents numbered in corpus order.
  std::vector<std::int64_t> file_documents(files.size(), 0);
  for (const std::vector<std::int64_t>& counts : workers.all_gather(my_counts)) {
    for (std::size_t i = 0; i + 1 < counts.size(); i += 2)
      file_documents[static_cast<std::size_t>(counts[i])] = counts[i + 1];
  }
  std::vector<std::int64_t> first(files.size() + 1, 0);
  for (std::size_t f = 0; f < files.size(); ++f) first[f + 1] = first[f] + file_documents[f];
  const std::int64_t total = first.back();
  auto global = [&](const Local& doc) { return first[static_cast<std::size_t>(doc.file)] + doc.index; };
  auto owner_of = [&](std::int64_t document) {
    const auto f = static_cast<std::size_t>(std::upper_bound(first.begin(), first.end(), document) - first.begin() - 1);
    return owner[f];
  };
  std::unordered_map<std::int64_t, std::size_t> position;  // this worker's documents: global -> local
  position.reserve(local.size());
  for (std::size_t i = 0; i < local.size(); ++i) position.emplace(global(local[i]), i);

  // 3. Exact duplicates: content hashes to their owners, star pairs there.
  std::vector<std::vector<KeyEntry>> outgoing(static_cast<std::size_t>(size));
  for (const Local& doc : local) {
    outgoing[static_cast<std::size_t>(doc.hash1 % static_cast<std::uint64_t>(size))].push_back(
        {doc.hash1, doc.hash2, global(doc)});
  }
  auto exchange_entries = [&](std::vector<std::vector<KeyEntry>>& out) {
    std::vector<std::string> messages;
    messages.reserve(out.size());
    for (auto& entries : out) messages.push_back(pack(entries));
    std::vector<KeyEntry> received;
    for (const std::string& message : workers.all_to_all_bytes(messages)) {
      const std::vector<KeyEntry> part = unpack<KeyEntry>(message);
      received.insert(received.end(), part.begin(), part.end());
    }
    for (auto& entries : out) entries.clear();
    return received;
  };
  std::vector<KeyEntry> hashes = exchange_entries(outgoing);
  std::vector<VerifiedPair> verified;
  for (const Pair& p : star_pairs(hashes)) verified.push_back({p.a, p.b, 1.0, 1});

  // 4. LSH: band keys to their owners, star pairs there (distinct pairs over all bands).
  for (std::size_t i = 0; i < local.size(); ++i) {
    const std::uint32_t* sig = signatures.data() + i * static_cast<std::size_t>(perms);
    for (int band = 0; band < options.minhash.bands; ++band) {
      const std::uint64_t key = hasher.band_key(sig, band);
      outgoing[static_cast<std::size_t>(key % static_cast<std::uint64_t>(size))].push_back(
          {key, static_cast<std::uint64_t>(band), global(local[i])});
    }
  }
  std::vector<KeyEntry> bands = exchange_entries(outgoing);
  std::vector<Pair> candidates = star_pairs(bands);
  bands.clear();
  bands.shrink_to_fit();

  // 5. Verify: each pair to the owner of a (who attaches a's signature), then to the owner of b.
  std::vector<std::vector<Pair>> to_first(static_cast<std::size_t>(size));
  for (const Pair& p : candidates) to_first[static_cast<std::size_t>(owner_of(p.a))].push_back(p);
  std::vector<std::string> messages;
  messages.reserve(to_first.size());
  for (auto& pairs : to_first) messages.push_back(pack(pairs));
  std::vector<Pair> at_first;
  for (const std::string& message : workers.all_to_all_bytes(messages)) {
    const std::vector<Pair> part = unpack<Pair>(message);
    at_first.insert(at_first.end(), part.begin(), part.end());
  }
  std::sort(at_first.begin(), at_first.end());
  at_first.erase(std::unique(at_first.begin(), at_first.end()), at_first.end());  // the same pair from several bands
  std::vector<std::string> with_signature(static_cast<std::size_t>(size));
  for (const Pair& p : at_first) {
    std::string& message = with_signature[static_cast<std::size_t>(owner_of(p.b))];
    message.append(reinterpret_cast<const char*>(&p), sizeof(p));
    const std::uint32_t* sig = signatures.data() + position.at(p.a) * static_cast<std::size_t>(perms);
    message.append(reinterpret_cast<const char*>(sig), static_cast<std::size_t>(perms) * sizeof(std::uint32_t));
  }
  const std::size_t record = sizeof(Pair) + static_cast<std::size_t>(perms) * sizeof(std::uint32_t);
  std::int64_t candidate_count = static_cast<std::int64_t>(at_first.size());
  for (const std::string& message : workers.all_to_all_bytes(with_signature)) {
    for (std::size_t at = 0; at + record <= message.size(); at += record) {
      Pair p{};
      std::memcpy(&p, message.data() + at, sizeof(p));
      std::vector<std::uint32_t> sig_a(static_cast<std::size_t>(perms));
      std::memcpy(sig_a.data(), message.data() + at + sizeof(p), sig_a.size() * sizeof(std::uint32_t));
      const std::uint32_t* sig_b = signatures.data() + position.at(p.b) * static_cast<std::size_t>(perms);
      const double j = estimated_jaccard(sig_a.data(), sig_b, perms);
      if (j >= options.threshold) verified.push_back({p.a, p.b, j, 0});
    }
  }

  // 6. Every worker: all verified pairs, the same union-find (root = the earliest document).
  std::vector<VerifiedPair> all_pairs;
  for (const std::string& part : workers.all_gather_bytes(pack(verified))) {
    const std::vector<VerifiedPair> pairs = unpack<VerifiedPair>(part);
    all_pairs.insert(all_pairs.end(), pairs.begin(), pairs.end());
  }
  std::sort(all_pairs.begin(), all_pairs.end(), [](const VerifiedPair& x, const VerifiedPair& y) {
    if (x.a != y.a) return x.a < y.a;
    if (x.b != y.b) return x.b < y.b;
    return x.exact > y.exact;
  });
  // A pair of equal documents also collides in every band: keep its exact record only.
  all_pairs.erase(std::unique(all_pairs.begin(), all_pairs.end(),
                              [](const VerifiedPair& x, const VerifiedPair& y) { return x.a == y.a && x.b == y.b; }),
                  all_pairs.end());
  std::vector<std::int64_t> parent(static_cast<std::size_t>(total));
  std::iota(parent.begin(), parent.end(), std::int64_t{0});
  std::vector<bool> exact_copy(static_cast<std::size_t>(total), false);
  std::int64_t near_pairs = 0;
  for (const VerifiedPair& p : all_pairs) {
    if (p.exact)
      exact_copy[static_cast<std::size_t>(p.b)] = true;
    else
      ++near_pairs;
    const std::int64_t ra = find_root(parent, p.a), rb = find_root(parent, p.b);
    if (ra != rb) parent[static_cast<std::size_t>(std::max(ra, rb))] = std::min(ra, rb);
  }
  DedupSummary summary;
  summary.kept.assign(static_cast<std::size_t>(total), true);
  std::vector<std::int64_t> members(static_cast<std::size_t>(total), 0);
  std::vector<std::int64_t> kept_document(static_cast<std::size_t>(total));  // the root of each cluster
  for (std::int64_t d = 0; d < total; ++d) {
    const std::int64_t root = find_root(parent, d);
    kept_document[static_cast<std::size_t>(d)] = root;
    ++members[static_cast<std::size_t>(root)];
    if (root != d) {
      summary.kept[static_cast<std::size_t>(d)] = false;
      (exact_copy[static_cast<std::size_t>(d)] ? summary.exact_duplicates : summary.near_duplicates) += 1;
    }
  }
  for (std::int64_t count : members) summary.clusters += count >= 2;
  summary.documents_in = total;
  summary.documents_out = total - summary.exact_duplicates - summary.near_duplicates;
  std::int64_t candidates_total = 0;
  for (const std::vector<std::int64_t>& c : workers.all_gather({candidate_count})) candidates_total += c[0];
  summary.candidate_pairs = candidates_total;
  summary.verified_pairs = near_pairs;

  // 7. Examples: the first near-duplicate pairs whose later document was dropped, located by
  //    their owners.
  std::vector<VerifiedPair> chosen;
  for (const VerifiedPair& p : all_pairs) {
    if (static_cast<int>(chosen.size()) >= options.examples) break;
    if (!p.exact && !summary.kept[static_cast<std::size_t>(p.b)]) chosen.push_back(p);
  }
  json located = json::object();
  for (const VerifiedPair& p : chosen) {
    for (std::int64_t d : {p.a, p.b}) {
      const auto it = position.find(d);
      if (it == position.end()) continue;
      const Local& doc = local[it->second];
      located[std::to_string(d)] = files[static_cast<std::size_t>(doc.file)] + ":" + std::to_string(doc.line);
    }
  }
  json where = json::object();
  for (const std::string& part : workers.all_gather_bytes(located.dump())) where.update(json::parse(part));
  for (const VerifiedPair& p : chosen) {
    summary.examples.push_back({where.at(std::to_string(p.a)).get<std::string>(),
                                where.at(std::to_string(p.b)).get<std::string>(), p.jaccard});
  }
  // Reports: each worker's input report, merged.
  for (const std::string& part : workers.all_gather_bytes(detail::input_report_json(report).dump())) {
    summary.report.merge(detail::input_report_from_json(json::parse(part)));
  }

  // 8. Output: each worker rewrites its files' kept documents (a second read) and lists what it
  //    removed (dedup_output.h), then the report.
  if (!options.output_dir.empty()) {
    if (rank == 0) fs::create_directories(options.output_dir);
    workers.barrier();
    summary.removed_path = detail::write_dedup_output(
        options, detail::DedupDecision{files, owner, first, summary.kept, kept_document, exact_copy}, workers);
    workers.barrier();
    if (rank == 0) {
      summary.report_path = (fs::path(options.output_dir) / "dedup_report.json").string();
      json examples = json::array();
      for (const DuplicatePair& e : summary.examples) {
        examples.push_back({{"kept", e.kept}, {"dropped", e.dropped}, {"estimated_jaccard", e.jaccard}});
      }
      const MinHashOptions& m = options.minhash;
      json out = {{"documents_in", summary.documents_in},
                  {"documents_out", summary.documents_out},
                  {"exact_duplicates", summary.exact_duplicates},
                  {"near_duplicates", summary.near_duplicates},
                  {"clusters", summary.clusters},
                  {"candidate_pairs", summary.candidate_pairs},
                  {"verified_pairs", summary.verified_pairs},
                  {"removed_list", fs::path(summary.removed_path).filename().string()},  // beside the report
                  {"options",
                   {{"num_perm", m.num_perm},
                    {"bands", m.bands},
                    {"rows", m.rows},
                    {"ngram", m.ngram},
                    {"shingles", m.char_ngrams ? "bytes" : "words"},
                    {"seed", m.seed},
                    {"threshold", options.threshold}}},
                  {"examples", examples},
                  {"input", detail::input_report_json(summary.report)}};
      std::ofstream file(summary.report_path);
      file << out.dump(2) << "\n";
    }
  }
  workers.barrier();
  return summary;
}

}  // namespace myriad::data
