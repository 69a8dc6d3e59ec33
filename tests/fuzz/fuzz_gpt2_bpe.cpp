// Fuzz target: the GPT-2 BPE loaders — BpeTokenizer::load_gpt2(encoder.json, vocab.bpe). The
// input holds both files, split at its first NUL byte (encoder.json before, vocab.bpe after; no
// NUL: all of it is encoder.json and vocab.bpe is empty). A tokenizer that loads also encodes
// and decodes a short text. Seeds: a small vocabulary written by fuzz_seeds.
#include <cstddef>
#include <cstdint>
#include <string_view>

#include "fuzz_scratch.h"
#include "myriad/core/error.h"
#include "myriad/data/bpe_tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string_view input = myriad::fuzz::as_text(data, size);
  const std::size_t split = input.find('\0');
  const std::string encoder = myriad::fuzz::scratch_file("encoder.json", input.substr(0, split));
  const std::string vocab =
      myriad::fuzz::scratch_file("vocab.bpe", split == std::string_view::npos ? "" : input.substr(split + 1));
  try {
    const myriad::data::BpeTokenizer tokenizer = myriad::data::BpeTokenizer::load_gpt2(encoder, vocab);
    (void)tokenizer.decode(tokenizer.encode("Hello world, the tokenizer's test."));
  } catch (const myriad::Error&) {
  }
  return 0;
}
