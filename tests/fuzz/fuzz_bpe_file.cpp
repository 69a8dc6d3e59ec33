// Fuzz target: the loader of myriad's own tokenizer file — BpeTokenizer::load (what save()
// writes, and checkpoints carry as tokenizer.bpe). A tokenizer that loads also encodes and
// decodes a short text. Seeds: small trained tokenizers written by fuzz_seeds.
#include <cstddef>
#include <cstdint>

#include "fuzz_scratch.h"
#include "myriad/core/error.h"
#include "myriad/data/bpe_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string path = myriad::fuzz::scratch_file("tokenizer.bpe", myriad::fuzz::as_text(data, size));
  try {
    const myriad::data::BpeTokenizer tokenizer = myriad::data::BpeTokenizer::load(path);
    (void)tokenizer.decode(tokenizer.encode("Hello world, the tokenizer's test."));
  } catch (const myriad::Error&) {
  }
  return 0;
}
