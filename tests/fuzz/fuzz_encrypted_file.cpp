// Fuzz target: the encrypted-file reader and the key-file parser (data/encrypted_file.h) on
// arbitrary bytes — read_encrypted_file under a fixed key ring (header decoding, the key unwrap,
// chunk sizes and tags; rewrap reads the same header) and KeyRing::load of them as a key file.
// Seeds: files written by fuzz_seeds under the same fixed key (fuzz_encryption_key).
#include <cstddef>
#include <cstdint>

#include "fuzz_scratch.h"
#include "myriad/core/error.h"
#include "myriad/data/encrypted_file.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  myriad::data::KeyRing keys;
  keys.add("fuzz", std::string(32, 'k'), true);
  const std::string path = myriad::fuzz::scratch_file("encrypted.bin", myriad::fuzz::as_text(data, size));
  try {
    (void)myriad::data::read_encrypted_file(path, keys);
  } catch (const myriad::Error&) {
  }
  try {
    (void)myriad::data::KeyRing::load(path);
  } catch (const myriad::Error&) {
  }
  return 0;
}
