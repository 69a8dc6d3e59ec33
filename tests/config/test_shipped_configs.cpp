// The configuration files shipped in configs/: each one parses (no unknown key, every value in
// range) and passes the cross-key validation for the world its parallel section describes, so a
// user who starts from one gets a run, not a config error.
#include <gtest/gtest.h>

#include <algorithm>

#include <filesystem>
#include <string>
#include <vector>

#include "myriad/config/run_config.h"
#include "myriad/core/error.h"

namespace myriad {
namespace {

namespace fs = std::filesystem;

TEST(ShippedConfigs, EveryFileParsesAndValidates) {
  const fs::path dir = fs::path(MYRIAD_SOURCE_DIR) / "configs";
  std::vector<fs::path> files;
  for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() == ".yaml") files.push_back(entry.path());
  }
  ASSERT_GE(files.size(), 4u) << "configs/ should hold the shipped examples";
  for (const fs::path& file : files) {
    SCOPED_TRACE(file.string());
    try {
      const RunConfig config = RunConfig::from_yaml_file(file.string());
      const ParallelConfig& p = config.parallel;
      config.validate(std::max({p.dp, p.ep, 1}) * p.tp * p.pp * p.cp);  // dp auto: the fewest ranks it allows
    } catch (const Error& e) {
      ADD_FAILURE() << e.what();
    }
  }
}

}  // namespace
}  // namespace myriad
