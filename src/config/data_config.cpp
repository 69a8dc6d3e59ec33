// DataConfig: its key table and the tokenizer spec "kind:argument".
#include "myriad/config/data_config.h"

#include <charconv>
#include <cmath>
#include <sstream>

#include "myriad/core/error.h"

namespace myriad {

namespace {

constexpr std::int64_t kMinTrainedVocab = 256;  // byte-level BPE starts from the 256 byte tokens
constexpr const char* kTokenizerForms =
    "gpt2:<dir with encoder.json and vocab.bpe, or Hugging Face's vocab.json and merges.txt>, bpe:<file>, train:<vocab "
    "size >= 256>, or \"\"";

// "" when `spec` is a valid tokenizer spec, else what is wrong.
std::string tokenizer_problem(std::string_view spec) {
  if (spec.empty()) return "";
  std::size_t colon = spec.find(':');
  std::string_view kind = spec.substr(0, colon);
  std::string_view argument = colon == std::string_view::npos ? std::string_view() : spec.substr(colon + 1);
  std::ostringstream problem;
  if (colon == std::string_view::npos || (kind != "gpt2" && kind != "bpe" && kind != "train")) {
    problem << "'" << spec << "' is not of the form " << kTokenizerForms;
  } else if (argument.empty()) {
    problem << "'" << spec << "' lacks the part after '" << kind << ":'";
  } else if (kind == "train") {
    std::int64_t size = 0;
    auto [end, ec] = std::from_chars(argument.data(), argument.data() + argument.size(), size);
    if (ec != std::errc() || end != argument.data() + argument.size() || size < kMinTrainedVocab) {
      problem << "'" << spec << "': train:<vocab size> needs an integer >= " << kMinTrainedVocab;
    }
  }
  return problem.str();
}

FieldCheck tokenizer_form() {
  return {std::string("of the form ") + kTokenizerForms, [](const FieldValue& v) {
            const auto* s = std::get_if<std::string>(&v);
            return !s || tokenizer_problem(*s).empty();
          }};
}

}  // namespace

const std::vector<Field<DataConfig>>& DataConfig::fields() {
  using D = DataConfig;
  static const std::vector<Field<D>> table = {
      make_field(
          "path", &D::path,
          "text file, folder of text files, or folder of token shards (used as they are: val_fraction, val_split, "
          "cache_dir and security.encrypt_token_shards are then refused); \"\" = the default corpus (driver)"),
      make_field("tokenizer", &D::tokenizer,
                 "GPT-2 files (gpt2:<dir>), a saved BPE (bpe:<file>) or train one (train:<vocab size>); "
                 "\"\" = train:<model.vocab_size>",
                 {.check = tokenizer_form()}),
      make_field("val_fraction", &D::val_fraction, "share of the corpus held out for validation",
                 {.check = in_range(0, 0.5, false, true)}),
      make_field("val_split", &D::val_split,
                 "how validation is held out: documents (every 1/val_fraction-th document: needs at least that many "
                 "documents), tail (the last val_fraction of the token stream), auto (tail for one file without a "
                 "document separator, else documents)",
                 {.allowed = {"auto", "documents", "tail"}}),
      make_field("cache_dir", &D::cache_dir, "where token shards are written; \"\" = <logging.dir>/data"),
      make_field("sources", &D::sources,
                 "a mixture instead of data.path: members {path: P, weight: W} (or \"P@W\"; weight 1 when left "
                 "out), each a corpus or a folder of token shards; each sample's source is drawn from (seed, step, "
                 "sample) in proportion to the weights; validation reads every source's val split",
                 {.repeats = true}),
  };
  return table;
}

void DataConfig::validate() const {
  validate_fields(*this);
  const std::vector<Source> list = source_list();
  MYRIAD_CHECK(list.empty() || path.empty(),
               "data.path ('" << path << "') and data.sources are both set: give the corpus one way");
}

std::vector<DataConfig::Source> DataConfig::source_list() const {
  std::vector<Source> out;
  for (const std::string& member : sources) {
    Source source{member, 1.0};
    const std::size_t at = member.rfind('@');
    if (at != std::string::npos) {
      const std::string weight = member.substr(at + 1);
      double value = 0.0;
      std::size_t used = 0;
      try {
        value = std::stod(weight, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      MYRIAD_CHECK(used == weight.size() && !weight.empty() && value > 0.0 && std::isfinite(value),
                   "data.sources: '" << member << "': the weight after '@' must be a number > 0");
      source = {member.substr(0, at), value};
    }
    MYRIAD_CHECK(!source.path.empty(), "data.sources: '" << member << "' has no path");
    out.push_back(source);
  }
  return out;
}

TokenizerSpec parse_tokenizer_spec(std::string_view spec) {
  std::string problem = tokenizer_problem(spec);
  MYRIAD_CHECK(problem.empty(), "data.tokenizer: " << problem);
  MYRIAD_CHECK(!spec.empty(), "data.tokenizer: empty spec; resolve it first (RunConfig::resolved())");
  std::size_t colon = spec.find(':');
  return {std::string(spec.substr(0, colon)), std::string(spec.substr(colon + 1))};
}

}  // namespace myriad
