// TextEncoding from a spec string (see text_encoding.h).
#include "myriad/data/text_encoding.h"

#include <filesystem>

#include "myriad/core/error.h"

namespace myriad::data {

TextEncoding load_text_encoding(const std::string& spec) {
  TextEncoding encoding;
  encoding.spec = spec;
  if (spec == "bytes") {
    encoding.encode = [](std::string_view text) {
      return std::vector<std::int32_t>(reinterpret_cast<const unsigned char*>(text.data()),
                                       reinterpret_cast<const unsigned char*>(text.data()) + text.size());
    };
    encoding.eot_id = 256;
    encoding.vocab_size = 257;
    return encoding;
  }
  const std::size_t colon = spec.find(':');
  const std::string kind = colon == std::string::npos ? spec : spec.substr(0, colon);
  MYRIAD_CHECK(colon != std::string::npos && (kind == "gpt2" || kind == "bpe"),
               "tokenizer '" << spec << "': expected gpt2:<dir>, bpe:<file> or bytes");
  const std::string value = spec.substr(colon + 1);
  encoding.bpe = std::make_shared<BpeTokenizer>(load_tokenizer(kind, value));
  if (kind == "gpt2") {
    const auto [vocabulary, merges] = gpt2_tokenizer_files(value);
    encoding.files = {vocabulary, merges};
  } else {
    encoding.files = {value};
  }
  std::shared_ptr<BpeTokenizer> bpe = encoding.bpe;
  encoding.encode = [bpe](std::string_view text) { return bpe->encode(text); };
  encoding.eot_id = bpe->eot_id();
  encoding.vocab_size = static_cast<std::uint32_t>(bpe->vocab_size());
  return encoding;
}

}  // namespace myriad::data
