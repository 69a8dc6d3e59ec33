// Fuzz target: the safetensors loader — read_safetensors on arbitrary bytes (header length,
// JSON header, dtypes, shapes, offsets, overlaps). Seeds: small files written by fuzz_seeds.
#include <cstddef>
#include <cstdint>

#include "fuzz_scratch.h"
#include "myriad/core/error.h"
#include "myriad/train/checkpoint/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = myriad::fuzz::scratch_file("model.safetensors", myriad::fuzz::as_text(data, size));
  try {
    (void)myriad::train::read_safetensors(path);
  } catch (const myriad::Error&) {
  }
  return 0;
}
