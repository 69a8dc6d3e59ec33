// The YAML documents of a config's text, with yaml-cpp's non-terminating parse turned into an
// error (see yaml_documents.h).
#include "yaml_documents.h"

#include <cstddef>
#include <sstream>

#include <yaml-cpp/eventhandler.h>

#include "myriad/core/error.h"

namespace myriad::detail {

namespace {

// Builds nothing; remembers where the last document started.
class DocumentStarts final : public YAML::EventHandler {
 public:
  YAML::Mark last;
  void OnDocumentStart(const YAML::Mark& mark) override { last = mark; }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark&, YAML::anchor_t) override {}
  void OnAlias(const YAML::Mark&, YAML::anchor_t) override {}
  void OnScalar(const YAML::Mark&, const std::string&, YAML::anchor_t, const std::string&) override {}
  void OnSequenceStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark&, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override {}
  void OnMapEnd() override {}
};

// "<source>:<line>" or just "<source>" (as the config reader's messages).
std::string at(const std::string& source, const YAML::Mark& mark) {
  if (mark.is_null() || mark.line < 0) return source;
  return source + ":" + std::to_string(mark.line + 1);
}

}  // namespace

std::vector<YAML::Node> load_yaml_documents(const std::string& text, const std::string& source_name) {
  try {
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentStarts starts;
    std::size_t documents = 0;
    while (parser.HandleNextDocument(starts)) {
      MYRIAD_CHECK(++documents <= text.size() + 1,
                   at(source_name, starts.last)
                       << ": invalid YAML: the parser stops making progress here (a ',' or another flow "
                          "indicator outside [...] or {...}?); a config is a map of sections, e.g. "
                          "'training: {steps: 100}'");
    }
    return YAML::LoadAll(text);
  } catch (const YAML::Exception& e) {
    MYRIAD_THROW(at(source_name, e.mark) << ": invalid YAML: " << e.msg);
  }
}

}  // namespace myriad::detail
