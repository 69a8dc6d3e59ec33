// TextEncoding — a tokenizer named by a spec string, as the data tools use it: "gpt2:<dir>"
// (GPT-2's encoder.json + vocab.bpe), "bpe:<file>" (a saved myriad BPE) or "bytes" (ids 0..255
// for the bytes, 256 for end-of-text). `files` lists what it was loaded from, for manifests.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "myriad/data/bpe_tokenizer.h"
#include "myriad/data/tokenize_corpus.h"

namespace myriad::data {

struct TextEncoding {
  std::string spec;
  std::shared_ptr<BpeTokenizer> bpe;  // null for "bytes"
  TextEncoder encode;                 // thread-safe
  std::int32_t eot_id = 0;
  std::uint32_t vocab_size = 0;
  std::vector<std::string> files;
};

// Throws naming the spec and the allowed forms.
TextEncoding load_text_encoding(const std::string& spec);

}  // namespace myriad::data
