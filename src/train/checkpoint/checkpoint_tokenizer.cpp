// The tokenizer of a checkpoint: fingerprint, writing it beside the manifest, the load-time
// comparison (train/checkpoint/checkpoint_tokenizer.h).
#include "myriad/train/checkpoint/checkpoint_tokenizer.h"

#include <cstdio>
#include <filesystem>
#include <sstream>

#include "myriad/train/checkpoint/checkpoint_folder.h"

namespace fs = std::filesystem;

namespace myriad::train {

namespace {

struct TokenizerFnv1a64 {
  std::uint64_t hash = 0xcbf29ce484222325ull;
  void add(const void* data, std::size_t size) {
    const auto* bytes = static_cast<const unsigned char*>(data);
    for (std::size_t i = 0; i < size; ++i) {
      hash ^= bytes[i];
      hash *= 0x100000001b3ull;
    }
  }
  void add_int(std::int64_t value) { add(&value, sizeof value); }
};

}  // namespace

std::string tokenizer_fingerprint(const data::BpeTokenizer& tokenizer) {
  TokenizerFnv1a64 fnv;
  fnv.add_int(tokenizer.vocab_size());
  fnv.add_int(tokenizer.eot_id());
  for (std::int32_t id = 0; id < tokenizer.vocab_size(); ++id) {
    const std::string& bytes = tokenizer.token_bytes(id);
    fnv.add_int(static_cast<std::int64_t>(bytes.size()));
    fnv.add(bytes.data(), bytes.size());
  }
  fnv.add_int(tokenizer.num_merges());
  for (const data::BpeTokenizer::Merge& m : tokenizer.merges()) {
    fnv.add_int(m.left);
    fnv.add_int(m.right);
  }
  char text[32];
  std::snprintf(text, sizeof text, "fnv1a64:%016llx", static_cast<unsigned long long>(fnv.hash));
  return text;
}

void write_checkpoint_tokenizer(const std::string& tmp_dir, const data::BpeTokenizer& tokenizer,
                                const data::AtRest& at_rest, CheckpointHeader& header) {
  tokenizer.save((fs::path(tmp_dir) / kCheckpointTokenizerFile).string(), at_rest);
  header.tokenizer_fingerprint = tokenizer_fingerprint(tokenizer);
  header.tokenizer_vocab_size = tokenizer.vocab_size();
}

std::string tokenizer_mismatch(const std::string& checkpoint_dir, const CheckpointHeader& header,
                               const data::BpeTokenizer* run_tokenizer, const std::string& tokenizer_spec) {
  if (header.tokenizer_fingerprint.empty() || run_tokenizer == nullptr) return "";
  const std::string run_fingerprint = tokenizer_fingerprint(*run_tokenizer);
  if (run_fingerprint == header.tokenizer_fingerprint) return "";
  const std::string saved = (fs::path(checkpoint_dir) / kCheckpointTokenizerFile).string();
  const bool trained = tokenizer_spec.empty() || tokenizer_spec.rfind("train:", 0) == 0;
  std::ostringstream why;
  why << "checkpoint: " << checkpoint_dir
      << " was trained with another tokenizer than this run's: the checkpoint's has " << header.tokenizer_vocab_size
      << " tokens (" << header.tokenizer_fingerprint << "), this run's " << run_tokenizer->vocab_size() << " tokens ("
      << run_fingerprint << "); its embeddings would be read with other token ids. ";
  if (trained) {
    why << "data.tokenizer '" << (tokenizer_spec.empty() ? "train:<model.vocab_size>" : tokenizer_spec)
        << "' trained a new vocabulary (the corpus changed since the checkpoint's run built its token cache). ";
  } else {
    why << "data.tokenizer is '" << tokenizer_spec << "', not the tokenizer the checkpoint's run used. ";
  }
  why << "Resume with the checkpoint's tokenizer: --set data.tokenizer=bpe:" << saved;
  return why.str();
}

std::string resume_checkpoint_dir(const RunConfig& config) {
  const std::string& resume = config.checkpoint.resume;
  if (resume.empty()) return "";
  if (resume == "auto") return find_resume_point(config.checkpoint.dir).path;
  return resume;
}

}  // namespace myriad::train
