// Fuzz target: the checkpoint manifest reader — CheckpointReader on a folder whose manifest.json
// is the input, beside a fixed 64-byte data file rank_0.bin (16 f32 values); a manifest that
// opens is verified (bounds, CRC-32) and each small tensor read whole. Seeds: manifests written
// by fuzz_seeds (one valid for rank_0.bin, with and without a tokenizer entry).
#include <cstddef>
#include <cstdint>
#include <string>

#include "fuzz_scratch.h"
#include "myriad/core/error.h"
#include "myriad/core/tensor.h"
#include "myriad/train/checkpoint/checkpoint_reader.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  static const std::string data_file = myriad::fuzz::scratch_file("rank_0.bin", std::string(64, '\x01'));
  (void)data_file;
  myriad::fuzz::scratch_file("manifest.json", myriad::fuzz::as_text(data, size));
  try {
    myriad::train::CheckpointReader reader(myriad::fuzz::scratch_dir().string(), "");
    reader.verify();
    for (const char* name : {"wte", "w"}) {
      if (!reader.has(name)) continue;
      myriad::Tensor dest = myriad::Tensor::empty({16});
      reader.read_whole(name, dest);
    }
  } catch (const myriad::Error&) {
  }
  return 0;
}
