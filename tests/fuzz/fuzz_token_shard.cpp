// Fuzz target: the token-shard reader — TokenShard::open (header, size, CRC, id range checks) on
// arbitrary bytes, then reads of its first and last tokens. Seeds: small shards written by
// fuzz_seeds.
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fuzz_scratch.h"
#include "myriad/core/error.h"
#include "myriad/data/token_shard.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = myriad::fuzz::scratch_file("shard.bin", myriad::fuzz::as_text(data, size));
  for (const bool verify : {true, false}) {
    try {
      const myriad::data::TokenShard shard = myriad::data::TokenShard::open(path, verify);
      const std::int64_t count = std::min<std::int64_t>(shard.size(), 64);
      std::vector<std::int32_t> ids(static_cast<std::size_t>(count));
      shard.read(0, count, ids.data());
      shard.read(shard.size() - count, count, ids.data());
    } catch (const myriad::Error&) {
    }
  }
  return 0;
}
