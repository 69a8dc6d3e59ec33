// Test support for the tokenizer tests: where the GPT-2 files are, an independent reference
// GPT-2 encoder, random text generators and scratch files.
//
// The reference shares no code with src/data: its byte map is a direct port of OpenAI's
// bytes_to_unicode, its pre-tokeniser is GPT-2's regex run by ICU's regex engine (with \s
// spelled \p{White_Space}, the `regex` module's meaning), encoder.json is read into a DOM with
// nlohmann-json, and BPE is GPT-2's bpe() loop on strings: find the adjacent pair of lowest rank
// (a std::map lookup per pair), merge all its occurrences left to right, repeat.
#pragma once

#include <gtest/gtest.h>
#include <unicode/regex.h>
#include <unicode/unistr.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace myriad::testing {

// $MYRIAD_SHARED_DATA, else <source dir>/../shared/data.
inline std::string shared_data_dir() {
  if (const char* env = std::getenv("MYRIAD_SHARED_DATA"); env != nullptr && *env != '\0') return env;
  return std::string(MYRIAD_SOURCE_DIR) + "/../shared/data";
}
inline std::string gpt2_encoder_path() { return shared_data_dir() + "/gpt2/encoder.json"; }
inline std::string gpt2_vocab_path() { return shared_data_dir() + "/gpt2/vocab.bpe"; }
inline std::string shakespeare_path() { return shared_data_dir() + "/tinyshakespeare.txt"; }
inline bool gpt2_files_present() {
  return std::filesystem::exists(gpt2_encoder_path()) && std::filesystem::exists(gpt2_vocab_path());
}
inline std::string gpt2_missing_message() {
  return "GPT-2 files not found at " + gpt2_encoder_path() + " / " + gpt2_vocab_path() +
         " (set MYRIAD_SHARED_DATA to the folder holding gpt2/encoder.json and gpt2/vocab.bpe)";
}

inline std::string read_whole_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  EXPECT_TRUE(in.is_open()) << "cannot open " << path;
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

// A file under the test temp dir, removed on scope exit.
class ScratchFile {
 public:
  explicit ScratchFile(const std::string& name, const std::string& contents = "") {
    static std::atomic<int> counter{0};
    path_ = ::testing::TempDir() + "myriad_tok_" + std::to_string(::getpid()) + "_" + std::to_string(counter++) + "_" +
            name;
    std::ofstream out(path_, std::ios::binary);
    out << contents;
  }
  ~ScratchFile() {
    std::error_code ignored;
    std::filesystem::remove(path_, ignored);
  }
  ScratchFile(const ScratchFile&) = delete;
  ScratchFile& operator=(const ScratchFile&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

// OpenAI's bytes_to_unicode, line by line: printable bytes keep their value, the others get
// 256, 257, ... in byte order.
inline std::vector<char32_t> reference_byte_map() {
  std::vector<int> bs;
  for (int b = '!'; b <= '~'; ++b) bs.push_back(b);
  for (int b = 0xA1; b <= 0xAC; ++b) bs.push_back(b);
  for (int b = 0xAE; b <= 0xFF; ++b) bs.push_back(b);
  std::vector<char32_t> cs(bs.begin(), bs.end());
  int n = 0;
  for (int b = 0; b < 256; ++b) {
    if (std::find(bs.begin(), bs.end(), b) == bs.end()) {
      bs.push_back(b);
      cs.push_back(static_cast<char32_t>(256 + n));
      ++n;
    }
  }
  std::vector<char32_t> map(256);
  for (std::size_t i = 0; i < bs.size(); ++i) map[bs[i]] = cs[i];
  return map;
}

// Raw bytes -> the vocabulary spelling (one mapped character per byte, UTF-8).
inline std::string reference_spelling(const std::string& bytes) {
  static const std::vector<char32_t> map = reference_byte_map();
  std::string out;
  for (unsigned char b : bytes) append_utf8(out, map[b]);
  return out;
}

// GPT-2's regex with ICU's engine; valid UTF-8 in, pieces (UTF-8) out.
class RegexPretokenizer {
 public:
  RegexPretokenizer() {
    UErrorCode status = U_ZERO_ERROR;
    const icu::UnicodeString pattern = icu::UnicodeString::fromUTF8(
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\p{White_Space}\\p{L}\\p{N}]+"
        "|\\p{White_Space}+(?!\\P{White_Space})|\\p{White_Space}+");
    pattern_.reset(icu::RegexPattern::compile(pattern, 0, status));
    EXPECT_TRUE(U_SUCCESS(status)) << u_errorName(status);
  }
  std::vector<std::string> split(const std::string& text) const {
    UErrorCode status = U_ZERO_ERROR;
    const icu::UnicodeString input = icu::UnicodeString::fromUTF8(text);
    std::unique_ptr<icu::RegexMatcher> matcher(pattern_->matcher(input, status));
    std::vector<std::string> pieces;
    while (matcher->find()) {
      std::string piece;
      matcher->group(status).toUTF8String(piece);
      pieces.push_back(std::move(piece));
    }
    EXPECT_TRUE(U_SUCCESS(status)) << u_errorName(status);
    return pieces;
  }

 private:
  std::unique_ptr<icu::RegexPattern> pattern_;
};

// GPT-2's encoder.py, naively.
class ReferenceGpt2 {
 public:
  ReferenceGpt2(const std::string& encoder_path, const std::string& vocab_path) {
    const nlohmann::json json = nlohmann::json::parse(read_whole_file(encoder_path));
    for (auto it = json.begin(); it != json.end(); ++it) encoder_[it.key()] = it.value().get<std::int32_t>();
    std::istringstream lines(read_whole_file(vocab_path));
    std::string line;
    std::getline(lines, line);  // "#version: 0.2"
    int rank = 0;
    while (std::getline(lines, line)) {
      if (line.empty()) continue;
      const std::size_t space = line.find(' ');
      ranks_[{line.substr(0, space), line.substr(space + 1)}] = rank++;
    }
  }

  std::size_t encoder_size() const { return encoder_.size(); }
  std::size_t merge_count() const { return ranks_.size(); }

  // Id of the token whose raw bytes are `bytes` (looked up in encoder.json by its spelling).
  std::int32_t id(const std::string& bytes) const {
    auto it = encoder_.find(reference_spelling(bytes));
    if (it == encoder_.end()) {
      ADD_FAILURE() << "no token spelled \"" << reference_spelling(bytes) << "\" in encoder.json";
      return -1;
    }
    return it->second;
  }
  std::int32_t special_id(const std::string& spelling) const { return encoder_.at(spelling); }

  std::vector<std::int32_t> ids(const std::vector<std::string>& token_bytes) const {
    std::vector<std::int32_t> out;
    out.reserve(token_bytes.size());
    for (const std::string& t : token_bytes) out.push_back(id(t));
    return out;
  }

  // bpe() of one piece: the list of token spellings.
  std::vector<std::string> bpe(const std::string& piece_bytes) const {
    std::vector<std::string> word;
    for (unsigned char b : piece_bytes) word.push_back(reference_spelling(std::string(1, static_cast<char>(b))));
    while (word.size() > 1) {
      int best_rank = -1;
      std::pair<std::string, std::string> best;
      for (std::size_t i = 0; i + 1 < word.size(); ++i) {
        auto it = ranks_.find({word[i], word[i + 1]});
        if (it != ranks_.end() && (best_rank < 0 || it->second < best_rank)) {
          best_rank = it->second;
          best = it->first;
        }
      }
      if (best_rank < 0) break;
      std::vector<std::string> merged;
      for (std::size_t i = 0; i < word.size(); ++i) {
        if (i + 1 < word.size() && word[i] == best.first && word[i + 1] == best.second) {
          merged.push_back(word[i] + word[i + 1]);
          ++i;
        } else {
          merged.push_back(word[i]);
        }
      }
      word = std::move(merged);
    }
    return word;
  }

  // Full encode of valid UTF-8 text. Memoises bpe() per piece (a speed-up only).
  std::vector<std::int32_t> encode(const std::string& text) {
    std::vector<std::int32_t> out;
    for (const std::string& piece : regex_.split(text)) {
      auto it = memo_.find(piece);
      if (it == memo_.end()) {
        std::vector<std::int32_t> ids;
        for (const std::string& spelling : bpe(piece)) ids.push_back(encoder_.at(spelling));
        it = memo_.emplace(piece, std::move(ids)).first;
      }
      out.insert(out.end(), it->second.begin(), it->second.end());
    }
    return out;
  }

  const RegexPretokenizer& regex() const { return regex_; }

 private:
  std::map<std::string, std::int32_t> encoder_;
  std::map<std::pair<std::string, std::string>, int> ranks_;
  RegexPretokenizer regex_;
  std::unordered_map<std::string, std::vector<std::int32_t>> memo_;
};

// Random valid UTF-8 mixing the cases the pre-tokeniser distinguishes: ASCII letters, digits,
// punctuation, apostrophes and contraction letters, spaces / tabs / newline runs, Unicode
// spaces, accented and combining letters, CJK, emoji, other-script digits, and any code point.
// `long_runs` adds runs of 65..300 characters (the long-piece code path).
inline std::string random_unicode_text(std::mt19937_64& rng, std::size_t max_chars, bool long_runs = false) {
  static const std::vector<std::string> pool = {"a",
                                                "b",
                                                "e",
                                                "s",
                                                "t",
                                                "r",
                                                "v",
                                                "l",
                                                "d",
                                                "m",
                                                "S",
                                                "T",
                                                "L",
                                                "Z",
                                                "0",
                                                "1",
                                                "7",
                                                "9",
                                                " ",
                                                " ",
                                                " ",
                                                "  ",
                                                "\t",
                                                "\n",
                                                "\n\n",
                                                "\r\n",
                                                "\v",
                                                "\f",
                                                "'",
                                                "'s",
                                                "'t",
                                                "'re",
                                                "'ve",
                                                "'m",
                                                "'ll",
                                                "'d",
                                                "'S",
                                                "'LL",
                                                ".",
                                                ",",
                                                "!",
                                                "?",
                                                "-",
                                                "(",
                                                ")",
                                                "\"",
                                                "#",
                                                "$",
                                                "%",
                                                "&",
                                                "*",
                                                "+",
                                                "/",
                                                ":",
                                                ";",
                                                "<",
                                                "|",
                                                ">",
                                                "@",
                                                "\\",
                                                "^",
                                                "_",
                                                "`",
                                                "{",
                                                "}",
                                                "~",
                                                "\xc2\xa0" /* NBSP */,
                                                "\xc2\x85" /* NEL */,
                                                "\xe2\x80\xa8" /* LS */,
                                                "\xe3\x80\x80" /* ideographic space */,
                                                "\xe2\x80\x8b" /* ZWSP */,
                                                "\xc3\xa9",
                                                "\xc3\xb1",
                                                "\xc3\x9f",
                                                "\xce\xa9",
                                                "\xd0\xb4",
                                                "e\xcc\x81" /* e + U+0301 */,
                                                "\xe4\xb8\xad",
                                                "\xe6\x96\x87",
                                                "\xed\x95\x9c",
                                                "\xf0\x9f\x98\x80",
                                                "\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd",
                                                "\xd9\xa3" /* Arabic-Indic 3 */,
                                                "\xc2\xb2",
                                                "\xc2\xbd",
                                                "\xe2\x85\xa7",
                                                "\xef\xbb\xbf",
                                                std::string(1, '\0'),
                                                "\x1c",
                                                "\x7f"};
  std::uniform_int_distribution<std::size_t> length(0, max_chars);
  std::uniform_int_distribution<std::size_t> pick(0, pool.size() - 1);
  std::uniform_int_distribution<int> kind(0, 9);
  std::uniform_int_distribution<std::uint32_t> any_cp(0, 0x10FFFF);
  std::string text;
  const std::size_t n = length(rng);
  for (std::size_t i = 0; i < n; ++i) {
    const int k = kind(rng);
    if (k < 7) {
      text += pool[pick(rng)];
    } else if (k < 9) {
      char32_t cp = any_cp(rng);
      if (cp >= 0xD800 && cp < 0xE000) cp = 0x41;
      append_utf8(text, cp);
    } else if (long_runs) {
      const std::size_t run = std::uniform_int_distribution<std::size_t>(65, 300)(rng);
      const std::string& unit = pool[pick(rng)];
      const bool mixed = kind(rng) < 5;  // random letters instead of one repeated unit
      for (std::size_t r = 0; r < run; ++r) text += mixed ? std::string(1, static_cast<char>('a' + kind(rng))) : unit;
    }
  }
  return text;
}

}  // namespace myriad::testing
