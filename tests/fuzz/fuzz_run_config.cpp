// Fuzz target: the YAML config reader — RunConfig::from_yaml_string on arbitrary text, then the
// resolution a run does next (resolved(), for_world). Seeds: configs/*.yaml.
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_scratch.h"
#include "myriad/config/run_config.h"
#include "myriad/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  try {
    const myriad::RunConfig config =
        myriad::RunConfig::from_yaml_string(std::string(myriad::fuzz::as_text(data, size)), "fuzz.yaml");
    const myriad::RunConfig resolved = config.resolved();
    (void)resolved.for_world(2);
  } catch (const myriad::Error&) {
  }
  return 0;
}
