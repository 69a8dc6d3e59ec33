// Internal: an InputReport as JSON and back (manifests, dedup reports, and the reports workers
// exchange): {"files", "documents", "document_bytes", "input_bytes", "empty_documents",
// "unchecked_frames", "problems": {kind: {"count", "examples"}}} with only the kinds that occurred.
#pragma once

#include <nlohmann/json.hpp>

#include "myriad/data/document_source.h"

namespace myriad::data::detail {

inline nlohmann::json input_report_json(const InputReport& report) {
  nlohmann::json problems = nlohmann::json::object();
  for (int kind = 0; kind < kInputProblemCount; ++kind) {
    const auto k = static_cast<std::size_t>(kind);
    if (report.problems[k] == 0) continue;
    problems[input_problem_name(static_cast<InputProblem>(kind))] = {{"count", report.problems[k]},
                                                                     {"examples", report.examples[k]}};
  }
  return {{"files", report.files},
          {"documents", report.documents},
          {"document_bytes", report.document_bytes},
          {"input_bytes", report.input_bytes},
          {"empty_documents", report.empty_documents},
          {"unchecked_frames", report.unchecked_frames},
          {"problems", problems}};
}

inline InputReport input_report_from_json(const nlohmann::json& j) {
  InputReport report;
  report.files = j.at("files");
  report.documents = j.at("documents");
  report.document_bytes = j.at("document_bytes");
  report.input_bytes = j.at("input_bytes");
  report.empty_documents = j.at("empty_documents");
  report.unchecked_frames = j.value("unchecked_frames", std::int64_t{0});  // absent in older manifests
  for (int kind = 0; kind < kInputProblemCount; ++kind) {
    const char* name = input_problem_name(static_cast<InputProblem>(kind));
    if (!j.at("problems").contains(name)) continue;
    const nlohmann::json& entry = j.at("problems").at(name);
    report.problems[static_cast<std::size_t>(kind)] = entry.at("count");
    report.examples[static_cast<std::size_t>(kind)] = entry.at("examples").get<std::vector<std::string>>();
  }
  return report;
}

}  // namespace myriad::data::detail
