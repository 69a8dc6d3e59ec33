// Fuzz target: the compressed-shard reader — CompressedTokenShard::open (header, block table)
// on arbitrary bytes, then reads that decompress the first and last blocks (zstd, CRC, id
// range). Seeds: small compressed shards written by fuzz_seeds.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz_scratch.h"
#include "myriad/core/error.h"
#include "myriad/data/compressed_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = myriad::fuzz::scratch_file("shard.zbin", myriad::fuzz::as_text(data, size));
  for (const bool verify : {true, false}) {
    try {
      const auto shard = myriad::data::CompressedTokenShard::open(path, verify);
      const std::int64_t count = std::min<std::int64_t>(shard->size(), 64);
      std::vector<std::int32_t> ids(static_cast<std::size_t>(count));
      shard->read(0, count, ids.data());
      shard->read(shard->size() - count, count, ids.data());
      (void)shard->format();
    } catch (const myriad::Error&) {
    }
  }
  return 0;
}
