// BpeTokenizer file formats: GPT-2's encoder.json + vocab.bpe (read) and myriad's versioned
// text format (read and write); see bpe_tokenizer.h for the layouts. Every reading error
// throws myriad::Error starting with "<path>:<line>:" (or "<path>:" when no line applies).
#include <charconv>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <unordered_map>

#include <nlohmann/json.hpp>

#include "myriad/core/error.h"
#include "myriad/data/at_rest.h"
#include "myriad/data/bpe_tokenizer.h"
#include "myriad/data/byte_unicode.h"

namespace myriad::data {

namespace {

constexpr const char* kEndOfText = "<|endoftext|>";
constexpr const char* kMagic = "myriad-bpe";
constexpr int kFormatVersion = 1;

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  MYRIAD_CHECK(in.is_open(), path << ": cannot open file for reading");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  MYRIAD_CHECK(!in.bad(), path << ": read error");
  return text;
}

std::int64_t line_at(const std::string& text, std::size_t pos) {
  if (pos > text.size()) pos = text.size();
  std::int64_t line = 1;
  for (std::size_t i = 0; i < pos; ++i) line += text[i] == '\n';
  return line;
}

// Splits text into lines ('\n'; a trailing '\r' is dropped); a final '\n' ends the last line
// rather than starting an empty one.
std::vector<std::string_view> split_lines(std::string_view text) {
  std::vector<std::string_view> lines;
  std::size_t pos = 0;
  while (pos < text.size()) {
    std::size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    lines.push_back(line);
    pos = end + 1;
  }
  return lines;
}

// Fields separated by runs of spaces or tabs.
std::vector<std::string_view> split_fields(std::string_view line) {
  std::vector<std::string_view> fields;
  std::size_t pos = 0;
  while (pos < line.size()) {
    while (pos < line.size() && (line[pos] == ' ' || line[pos] == '\t')) ++pos;
    std::size_t end = pos;
    while (end < line.size() && line[end] != ' ' && line[end] != '\t') ++end;
    if (end > pos) fields.push_back(line.substr(pos, end - pos));
    pos = end;
  }
  return fields;
}

bool parse_int(std::string_view s, std::int64_t& value) {
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), value);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// Input iterator over a char buffer that records how far the JSON lexer has read, so the SAX
// handler below can give line numbers for keys.
class TrackedIterator {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;

  TrackedIterator(const char* p, const char** furthest) : p_(p), furthest_(furthest) {}
  reference operator*() const {
    *furthest_ = p_;
    return *p_;
  }
  TrackedIterator& operator++() {
    ++p_;
    return *this;
  }
  TrackedIterator operator++(int) {
    TrackedIterator old = *this;
    ++p_;
    return old;
  }
  bool operator==(const TrackedIterator& other) const { return p_ == other.p_; }
  bool operator!=(const TrackedIterator& other) const { return p_ != other.p_; }

 private:
  const char* p_;
  const char** furthest_;
};

struct EncoderEntry {
  std::string key;
  std::int64_t id;
  std::size_t pos;  // byte offset of the key's end in the file
};

// SAX handler for encoder.json: one flat object of string -> non-negative integer.
class EncoderSax {
 public:
  EncoderSax(const std::string& path, const std::string& text, const char** furthest)
      : path_(path), text_(text), furthest_(furthest) {}

  std::vector<EncoderEntry> entries;

  bool null() { return bad_value("null"); }
  bool boolean(bool) { return bad_value("a boolean"); }
  bool number_integer(std::int64_t v) { return v < 0 ? bad_value("a negative number") : add(v); }
  bool number_unsigned(std::uint64_t v) {
    return v > static_cast<std::uint64_t>(std::numeric_limits<std::int32_t>::max()) ? bad_value("a number too large")
                                                                                    : add(static_cast<std::int64_t>(v));
  }
  bool number_float(double, const std::string&) { return bad_value("a non-integer number"); }
  bool string(std::string&) { return bad_value("a string"); }
  bool binary(nlohmann::json::binary_t&) { return bad_value("binary data"); }
  bool start_object(std::size_t) {
    if (depth_ != 0) bad_value("an object");
    ++depth_;
    return true;
  }
  bool end_object() {
    --depth_;
    return true;
  }
  bool start_array(std::size_t) { return bad_value("an array"); }
  bool end_array() { return true; }
  bool key(std::string& k) {
    key_ = k;
    key_pos_ = here();
    return true;
  }
  bool parse_error(std::size_t position, const std::string&, const nlohmann::detail::exception& ex) {
    MYRIAD_THROW(path_ << ":" << line_at(text_, position > 0 ? position - 1 : 0) << ": malformed JSON: " << ex.what());
  }

 private:
  std::size_t here() const { return static_cast<std::size_t>(*furthest_ - text_.data()); }
  bool add(std::int64_t id) {
    if (depth_ != 1) return bad_value("a number");
    entries.push_back({key_, id, key_pos_});
    return true;
  }
  bool bad_value(const char* what) {
    if (depth_ == 0) MYRIAD_THROW(path_ << ":" << line_at(text_, here()) << ": expected a JSON object, found " << what);
    MYRIAD_THROW(path_ << ":" << line_at(text_, here()) << ": token \"" << key_
                       << "\" must map to a non-negative integer id, found " << what);
  }

  const std::string& path_;
  const std::string& text_;
  const char** furthest_;
  int depth_ = 0;
  std::string key_;
  std::size_t key_pos_ = 0;
};

}  // namespace

BpeTokenizer BpeTokenizer::load_gpt2(const std::string& encoder_json_path, const std::string& vocab_bpe_path) {
  // encoder.json -> tokens (bytes by id) and token string -> id.
  const std::string json_text = read_file(encoder_json_path);
  const char* furthest = json_text.data();
  EncoderSax sax(encoder_json_path, json_text, &furthest);
  const TrackedIterator first(json_text.data(), &furthest), last(json_text.data() + json_text.size(), &furthest);
  nlohmann::json::sax_parse(first, last, &sax);
  const auto where = [&](const EncoderEntry& e) {
    return encoder_json_path + ":" + std::to_string(line_at(json_text, e.pos)) + ":";
  };

  const auto n = static_cast<std::int64_t>(sax.entries.size());
  std::vector<std::string> tokens(n);
  std::vector<char> seen(n, 0);
  std::unordered_map<std::string, std::int32_t> by_string;
  by_string.reserve(n * 2);
  std::int32_t eot = -1;
  for (const EncoderEntry& e : sax.entries) {
    MYRIAD_CHECK(e.id < n, where(e) << " token \"" << e.key << "\" has id " << e.id << " but the file holds " << n
                                    << " tokens: ids must be 0.." << n - 1);
    MYRIAD_CHECK(!seen[e.id], where(e) << " id " << e.id << " is used twice (again by \"" << e.key << "\")");
    seen[e.id] = 1;
    MYRIAD_CHECK(by_string.emplace(e.key, static_cast<std::int32_t>(e.id)).second,
                 where(e) << " token \"" << e.key << "\" appears twice");
    MYRIAD_CHECK(unicode_string_to_bytes(e.key, tokens[e.id]) && !tokens[e.id].empty(),
                 where(e) << " token \"" << e.key << "\" is not a byte-level token string (GPT-2 byte->Unicode map)");
    if (e.key == kEndOfText) eot = static_cast<std::int32_t>(e.id);
  }
  MYRIAD_CHECK(eot >= 0, encoder_json_path << ": no \"" << kEndOfText << "\" token");

  // vocab.bpe -> merges in rank order.
  const std::string bpe_text = read_file(vocab_bpe_path);
  const std::vector<std::string_view> lines = split_lines(bpe_text);
  std::size_t first_merge = 0;
  if (!lines.empty() && lines[0].starts_with("#version")) first_merge = 1;
  std::vector<Merge> merges;
  merges.reserve(lines.size());
  std::string joined;
  for (std::size_t i = first_merge; i < lines.size(); ++i) {
    const std::size_t line = i + 1;
    const std::vector<std::string_view> fields = split_fields(lines[i]);
    MYRIAD_CHECK(fields.size() == 2, vocab_bpe_path << ":" << line << ": expected a merge \"left right\", got \""
                                                    << excerpt(lines[i]) << "\"");
    Merge m;
    for (int side = 0; side < 2; ++side) {
      auto it = by_string.find(std::string(fields[side]));
      MYRIAD_CHECK(it != by_string.end(), vocab_bpe_path << ":" << line << ": merge refers to unknown token \""
                                                         << excerpt(fields[side]) << "\" (not in " << encoder_json_path
                                                         << ")");
      (side == 0 ? m.left : m.right) = it->second;
    }
    joined.assign(fields[0]);
    joined.append(fields[1]);
    MYRIAD_CHECK(by_string.count(joined), vocab_bpe_path << ":" << line << ": merge result \"" << excerpt(joined)
                                                         << "\" is not a token of " << encoder_json_path);
    merges.push_back(m);
  }
  Origin origin{encoder_json_path, vocab_bpe_path, 0, static_cast<std::int64_t>(first_merge) + 1};
  return BpeTokenizer(std::move(tokens), std::move(merges), eot, origin);
}

std::string BpeTokenizer::to_text() const {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  out += std::string(kMagic) + " " + std::to_string(kFormatVersion) + "\n";
  out += "tokens " + std::to_string(tokens_.size()) + "\n";
  out += "eot " + std::to_string(eot_id_) + "\n";
  out += "merges " + std::to_string(merges_.size()) + "\n";
  for (const std::string& bytes : tokens_) {
    for (char c : bytes) {
      out.push_back(kHex[static_cast<unsigned char>(c) >> 4]);
      out.push_back(kHex[static_cast<unsigned char>(c) & 15]);
    }
    out.push_back('\n');
  }
  for (const Merge& m : merges_) out += std::to_string(m.left) + " " + std::to_string(m.right) + "\n";
  return out;
}

void BpeTokenizer::save(const std::string& path, const AtRest& at_rest) const { at_rest.write_all(path, to_text()); }

BpeTokenizer BpeTokenizer::load(const std::string& path, const AtRest& at_rest) {
  MYRIAD_CHECK(std::filesystem::is_regular_file(path), path << ": cannot open file for reading");
  return from_text(at_rest.read_all(path), path);
}

BpeTokenizer BpeTokenizer::from_text(const std::string& text, const std::string& path) {
  const std::vector<std::string_view> lines = split_lines(text);
  const auto line_of = [&](std::size_t index) -> std::string_view {
    MYRIAD_CHECK(index < lines.size(), path << ":" << index + 1 << ": file ends early (truncated?)");
    return lines[index];
  };
  // Header: "myriad-bpe 1", "tokens N", "eot E", "merges M".
  {
    std::vector<std::string_view> f = split_fields(line_of(0));
    std::int64_t version = 0;
    MYRIAD_CHECK(f.size() == 2 && f[0] == kMagic && parse_int(f[1], version),
                 path << ":1: not a myriad BPE file (expected \"" << kMagic << " " << kFormatVersion << "\")");
    MYRIAD_CHECK(version == kFormatVersion, path << ":1: format version " << version
                                                 << " is not supported (this build reads " << kFormatVersion << ")");
  }
  const auto header_value = [&](std::size_t index, const char* name) {
    std::vector<std::string_view> f = split_fields(line_of(index));
    std::int64_t value = 0;
    MYRIAD_CHECK(f.size() == 2 && f[0] == name && parse_int(f[1], value) && value >= 0 &&
                     value < std::numeric_limits<std::int32_t>::max(),
                 path << ":" << index + 1 << ": expected \"" << name << " <count>\", got \"" << lines[index] << "\"");
    return value;
  };
  const std::int64_t n = header_value(1, "tokens");
  const std::int64_t eot = header_value(2, "eot");
  const std::int64_t m = header_value(3, "merges");
  constexpr std::size_t kFirstToken = 4;
  MYRIAD_CHECK(lines.size() == kFirstToken + static_cast<std::size_t>(n + m),
               path << ": expected " << kFirstToken + n + m << " lines (header, " << n << " tokens, " << m
                    << " merges), found " << lines.size());

  std::vector<std::string> tokens(n);
  const auto hex_value = [](char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    return -1;
  };
  for (std::int64_t id = 0; id < n; ++id) {
    const std::size_t index = kFirstToken + id;
    std::string_view hex = lines[index];
    bool ok = !hex.empty() && hex.size() % 2 == 0;
    std::string& bytes = tokens[id];
    bytes.reserve(hex.size() / 2);
    for (std::size_t i = 0; ok && i < hex.size(); i += 2) {
      int hi = hex_value(hex[i]), lo = hex_value(hex[i + 1]);
      ok = hi >= 0 && lo >= 0;
      bytes.push_back(static_cast<char>(hi * 16 + lo));
    }
    MYRIAD_CHECK(ok, path << ":" << index + 1 << ": token " << id << ": expected lower-case hex bytes, got \""
                          << excerpt(hex) << "\"");
  }
  std::vector<Merge> merges(m);
  for (std::int64_t rank = 0; rank < m; ++rank) {
    const std::size_t index = kFirstToken + n + rank;
    std::vector<std::string_view> f = split_fields(lines[index]);
    std::int64_t left = -1, right = -1;
    MYRIAD_CHECK(
        f.size() == 2 && parse_int(f[0], left) && parse_int(f[1], right),
        path << ":" << index + 1 << ": expected a merge \"<left id> <right id>\", got \"" << lines[index] << "\"");
    MYRIAD_CHECK(left >= 0 && left < n && right >= 0 && right < n,
                 path << ":" << index + 1 << ": merge refers to unknown token "
                      << (left >= 0 && left < n ? right : left) << " (vocabulary has " << n << " tokens)");
    merges[rank] = Merge{static_cast<std::int32_t>(left), static_cast<std::int32_t>(right), 0};
  }
  Origin origin{path, path, static_cast<std::int64_t>(kFirstToken) + 1, static_cast<std::int64_t>(kFirstToken + n) + 1};
  return BpeTokenizer(std::move(tokens), std::move(merges), static_cast<std::int32_t>(eot), origin);
}

std::pair<std::string, std::string> gpt2_tokenizer_files(const std::string& dir) {
  const std::filesystem::path folder(dir);
  if (std::filesystem::exists(folder / "encoder.json") || !std::filesystem::exists(folder / "vocab.json")) {
    return {(folder / "encoder.json").string(), (folder / "vocab.bpe").string()};
  }
  return {(folder / "vocab.json").string(), (folder / "merges.txt").string()};
}

BpeTokenizer load_tokenizer(std::string_view kind, const std::string& argument, const AtRest& at_rest) {
  if (kind == "gpt2") {
    const auto [vocabulary, merges] = gpt2_tokenizer_files(argument);
    return BpeTokenizer::load_gpt2(vocabulary, merges);
  }
  if (kind == "bpe") return BpeTokenizer::load(argument, at_rest);
  MYRIAD_THROW("tokenizer kind '" << kind << "' names no saved tokenizer; allowed: gpt2:<dir>, bpe:<file>");
}

}  // namespace myriad::data
