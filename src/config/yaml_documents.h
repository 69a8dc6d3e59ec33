// Internal: the YAML documents of a config's text — yaml-cpp's LoadAll, guarded against its
// endless loop. yaml-cpp 0.7's parser returns an empty document forever, consuming nothing, on
// some malformed input (a ',' outside any flow collection, found by tests/fuzz/fuzz_run_config),
// so LoadAll would allocate until killed. The text is first walked with a parser that builds
// nothing and stops once it has seen more documents than the text could hold (every document
// after the first needs at least one byte): that input is a myriad::Error naming the source and the
// line. YAML syntax errors are myriad::Errors as well.
#pragma once

#include <string>
#include <vector>

#include <yaml-cpp/yaml.h>

namespace myriad::detail {

std::vector<YAML::Node> load_yaml_documents(const std::string& text, const std::string& source_name);

}  // namespace myriad::detail
