// Dedup's output: the kept documents of each input file, with their JSON records intact, and the
// list of removed documents with the kept document each duplicates (see dedup_output.h).
#include "dedup_output.h"

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "myriad/core/error.h"

namespace myriad::data::detail {

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

constexpr const char* kRemovedListName = "dedup_removed.jsonl";
constexpr const char* kIdField = "id";

// "<index, 6 digits>_<name without .zst/.zstd, ending in .jsonl>"
std::string output_name(const std::string& file, std::size_t index) {
  char prefix[32];
  std::snprintf(prefix, sizeof(prefix), "%06zu_", index);
  std::string name = fs::path(file).filename().string();
  for (const char* suffix : {".zst", ".zstd"}) {
    if (name.ends_with(suffix)) name.resize(name.size() - std::strlen(suffix));
  }
  if (!name.ends_with(".jsonl")) name += ".jsonl";
  return prefix + name;
}

// Where a document is: {"at": "file:line"} plus {"id": ...} when its JSON record has a non-null id.
json label_of(const std::string& file, const DocumentRecord& record) {
  json label = {{"at", file + ":" + std::to_string(record.line)}};
  if (!record.json.empty()) {
    const json object = json::parse(record.json, nullptr, false);
    if (object.is_object()) {
      const auto id = object.find(kIdField);
      if (id != object.end() && !id->is_null()) label["id"] = *id;
    }
  }
  return label;
}

std::string part_path(const std::string& output_dir, std::size_t file) {
  return (fs::path(output_dir) / (std::string(kRemovedListName) + "." + std::to_string(file) + ".part")).string();
}

struct Removed {
  std::int64_t document, kept_document;
  json label;
};

}  // namespace

std::string write_dedup_output(const DedupOptions& options, const DedupDecision& decision, WorkerGroup& workers) {
  const int rank = workers.rank(), size = workers.size();
  const std::int64_t total = decision.first.back();
  const std::string& dir = options.output_dir;
  auto file_of = [&](std::int64_t document) {
    return static_cast<std::size_t>(std::upper_bound(decision.first.begin(), decision.first.end(), document) -
                                    decision.first.begin() - 1);
  };
  // Kept documents that others duplicate: their labels are sent to the owners of those others.
  std::vector<bool> duplicated(static_cast<std::size_t>(total), false);
  for (std::int64_t d = 0; d < total; ++d) {
    const std::int64_t k = decision.kept_document[static_cast<std::size_t>(d)];
    if (k != d) duplicated[static_cast<std::size_t>(k)] = true;
  }

  // 1. Each worker rewrites its files' kept documents (a second read), noting labels on the way.
  std::vector<std::vector<Removed>> removed(decision.files.size());
  json kept_labels = json::object();  // this worker's duplicated kept documents: global index -> label
  for (std::size_t f = 0; f < decision.files.size(); ++f) {
    if (decision.owner[f] != rank) continue;
    const std::string& file = decision.files[f];
    const std::string path = (fs::path(dir) / output_name(file, f)).string();
    std::ofstream out(path + ".tmp", std::ios::trunc);
    MYRIAD_CHECK(out.good(), "cannot create '" << path << ".tmp'");
    std::int64_t index = 0;
    const std::int64_t documents = decision.first[f + 1] - decision.first[f];
    InputReport again;
    for_each_file_record(file, options.source, again, [&](const DocumentRecord& record) {
      MYRIAD_CHECK(index < documents,
                   "'" << file << "' changed while it was deduplicated (more than " << documents << " documents now)");
      const std::int64_t d = decision.first[f] + index++;
      if (decision.kept[static_cast<std::size_t>(d)]) {
        if (record.json.empty()) {
          out << json({{"text", record.text}}).dump() << "\n";
        } else {
          out << record.json << "\n";
        }
        if (duplicated[static_cast<std::size_t>(d)]) kept_labels[std::to_string(d)] = label_of(file, record);
      } else {
        removed[f].push_back({d, decision.kept_document[static_cast<std::size_t>(d)], label_of(file, record)});
      }
    });
    out.close();
    MYRIAD_CHECK(out.good() && index == documents, "'" << file << "' changed while it was deduplicated (" << index
                                                       << " documents, " << documents << " before)");
    fs::rename(path + ".tmp", path);
  }

  // 2. The labels of kept documents go to the owners of the documents that duplicate them.
  std::vector<json> to(static_cast<std::size_t>(size), json::object());
  for (std::int64_t d = 0; d < total; ++d) {
    const std::int64_t k = decision.kept_document[static_cast<std::size_t>(d)];
    if (k == d || decision.owner[file_of(k)] != rank) continue;
    const std::string key = std::to_string(k);
    to[static_cast<std::size_t>(decision.owner[file_of(d)])][key] = kept_labels.at(key);
  }
  std::vector<std::string> messages;
  messages.reserve(to.size());
  for (const json& message : to) messages.push_back(message.dump());
  json labels = json::object();
  for (const std::string& message : workers.all_to_all_bytes(messages)) labels.update(json::parse(message));

  // 3. Each worker lists its files' removed documents in a part per file; worker 0 joins the parts.
  for (std::size_t f = 0; f < decision.files.size(); ++f) {
    if (decision.owner[f] != rank) continue;
    std::ofstream part(part_path(dir, f), std::ios::trunc);
    for (const Removed& r : removed[f]) {
      const json& kept = labels.at(std::to_string(r.kept_document));
      json entry = {{"removed", r.label.at("at")}};
      if (r.label.contains("id")) entry["removed_id"] = r.label.at("id");
      entry["duplicate_of"] = kept.at("at");
      if (kept.contains("id")) entry["duplicate_of_id"] = kept.at("id");
      entry["kind"] = decision.exact_copy[static_cast<std::size_t>(r.document)] ? "exact" : "near";
      part << entry.dump() << "\n";
    }
    part.close();
    MYRIAD_CHECK(part.good(), "cannot write '" << part_path(dir, f) << "'");
  }
  workers.barrier();
  const std::string list = (fs::path(dir) / kRemovedListName).string();
  if (rank == 0) {
    std::ofstream out(list + ".tmp", std::ios::trunc | std::ios::binary);
    MYRIAD_CHECK(out.good(), "cannot create '" << list << ".tmp'");
    for (std::size_t f = 0; f < decision.files.size(); ++f) {
      std::ifstream part(part_path(dir, f), std::ios::binary);
      MYRIAD_CHECK(part.good(), "cannot read '" << part_path(dir, f) << "'");
      if (part.peek() != std::ifstream::traits_type::eof()) out << part.rdbuf();  // an empty copy fails
      part.close();
      fs::remove(part_path(dir, f));
    }
    out.close();
    MYRIAD_CHECK(out.good(), "cannot write '" << list << "'");
    fs::rename(list + ".tmp", list);
  }
  return list;
}

}  // namespace myriad::data::detail
