// BpeTokenizer::train against a naive trainer written here (ICU regex pieces, full pair
// recount every step, same tie rule), plus round trips, determinism, early stop, save / load.
#include <gtest/gtest.h>

#include <map>

#include "myriad/data/bpe_tokenizer.h"
#include "reference.h"
#include "test_helpers.h"
#include "tokenizer_test_support.h"

namespace myriad::data {
namespace {

struct NaiveBpe {
  std::vector<std::string> tokens;                  // bytes by id; the last one is "<|endoftext|>"
  std::vector<std::array<std::int32_t, 3>> merges;  // (left, right, result) by rank
};

// Textbook BPE training: recount every adjacent pair in every word (weighted by the word's
// count), take the most frequent (ties: smallest (left, right)), merge it in every word left to
// right, until vocab_size - 1 tokens or no pair is left; then add the end-of-text token.
NaiveBpe naive_train(const std::string& text, std::int32_t vocab_size) {
  std::map<std::string, std::int64_t> word_counts;
  for (const std::string& piece : testing::RegexPretokenizer().split(text)) ++word_counts[piece];
  std::vector<std::pair<std::vector<std::int32_t>, std::int64_t>> words;
  for (const auto& [word, count] : word_counts) {
    std::vector<std::int32_t> symbols;
    for (unsigned char c : word) symbols.push_back(c);
    words.emplace_back(symbols, count);
  }
  NaiveBpe out;
  for (int b = 0; b < 256; ++b) out.tokens.emplace_back(1, static_cast<char>(b));
  while (static_cast<std::int32_t>(out.tokens.size()) < vocab_size - 1) {
    std::map<std::pair<std::int32_t, std::int32_t>, std::int64_t> pairs;
    for (const auto& [symbols, count] : words)
      for (std::size_t i = 0; i + 1 < symbols.size(); ++i) pairs[{symbols[i], symbols[i + 1]}] += count;
    if (pairs.empty()) break;
    auto best = pairs.begin();
    for (auto it = pairs.begin(); it != pairs.end(); ++it)
      if (it->second > best->second) best = it;
    const auto [left, right] = best->first;
    const std::string bytes = out.tokens[left] + out.tokens[right];
    auto found = std::find(out.tokens.begin(), out.tokens.end(), bytes);
    const auto result = static_cast<std::int32_t>(found - out.tokens.begin());
    if (found == out.tokens.end()) out.tokens.push_back(bytes);
    out.merges.push_back({left, right, result});
    for (auto& [symbols, count] : words) {
      std::vector<std::int32_t> merged;
      for (std::size_t i = 0; i < symbols.size(); ++i) {
        if (i + 1 < symbols.size() && symbols[i] == left && symbols[i + 1] == right) {
          merged.push_back(result);
          ++i;
        } else {
          merged.push_back(symbols[i]);
        }
      }
      symbols = std::move(merged);
    }
  }
  out.tokens.emplace_back("<|endoftext|>");
  return out;
}

// Seeded pseudo-text: words built from a few syllables (so pairs repeat and ties happen),
// contractions, digits, whitespace runs, runs of one letter (overlapping pairs) and non-ASCII.
std::string generated_text(std::uint64_t seed, std::size_t words) {
  static const std::vector<std::string> syllables = {"th",
                                                     "e",
                                                     "an",
                                                     "in",
                                                     "er",
                                                     "qu",
                                                     "a",
                                                     "o",
                                                     "s",
                                                     "aa",
                                                     "ll",
                                                     "caf\xc3\xa9",
                                                     "\xe6\x97\xa5\xe6\x9c\xac",
                                                     "\xf0\x9f\x98\x80",
                                                     "7"};
  static const std::vector<std::string> separators = {" ", " ", " ", "\n", ", ", ".\n\n", "  ", "'s ", "'t ", "\t"};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<std::size_t> syllable(0, syllables.size() - 1), separator(0, separators.size() - 1);
  std::uniform_int_distribution<int> length(1, 4);
  std::string text;
  for (std::size_t w = 0; w < words; ++w) {
    for (int s = length(rng); s > 0; --s) text += syllables[syllable(rng)];
    if (w % 97 == 0) text += std::string(9, 'a');
    text += separators[separator(rng)];
  }
  return text;
}

void expect_same_as_naive(const BpeTokenizer& tok, const NaiveBpe& naive) {
  ASSERT_EQ(static_cast<std::size_t>(tok.vocab_size()), naive.tokens.size());
  ASSERT_EQ(static_cast<std::size_t>(tok.num_merges()), naive.merges.size());
  EXPECT_EQ(tok.eot_id(), tok.vocab_size() - 1);
  for (std::size_t r = 0; r < naive.merges.size(); ++r) {
    const BpeTokenizer::Merge& m = tok.merges()[r];
    ASSERT_EQ((std::array<std::int32_t, 3>{m.left, m.right, m.result}), naive.merges[r]) << "merge rank " << r;
  }
  for (std::int32_t id = 0; id < tok.vocab_size(); ++id)
    ASSERT_EQ(tok.token_bytes(id), naive.tokens[id]) << "token " << id;
}

TEST(BpeTrain, MatchesNaiveTrainerOnGeneratedText) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const std::string text = generated_text(seed, 3000);
  for (std::int32_t vocab : {257, 300, 420}) {
    SCOPED_TRACE("vocab_size " + std::to_string(vocab));
    expect_same_as_naive(BpeTokenizer::train(text, vocab), naive_train(text, vocab));
  }
}

TEST(BpeTrain, MatchesNaiveTrainerOnShakespeare) {
  if (!std::filesystem::exists(testing::shakespeare_path()))
    GTEST_SKIP() << testing::shakespeare_path() << " not found (set MYRIAD_SHARED_DATA)";
  const std::string text = testing::read_whole_file(testing::shakespeare_path()).substr(0, 40000);
  expect_same_as_naive(BpeTokenizer::train(text, 400), naive_train(text, 400));
}

TEST(BpeTrain, RoundTripsAndCompresses) {
  std::string text;
  if (std::filesystem::exists(testing::shakespeare_path()))
    text = testing::read_whole_file(testing::shakespeare_path()).substr(0, 200000);
  else
    text = generated_text(7, 30000);
  SCOPED_TRACE(std::to_string(text.size()) + " bytes of training text");
  const BpeTokenizer tok = BpeTokenizer::train(text, 1024);
  EXPECT_EQ(tok.vocab_size(), 1024);
  EXPECT_EQ(tok.eot_id(), 1023);
  EXPECT_EQ(tok.token_bytes(tok.eot_id()), "<|endoftext|>");
  const std::vector<std::int32_t> ids = tok.encode(text);
  EXPECT_EQ(tok.decode(ids), text);
  // 767 merges learnt on this very text: fewer than one token per two bytes (Shakespeare: ~2.6
  // bytes per token; 255 merges would give ~2.0).
  EXPECT_LT(ids.size() * 2, text.size());
  for (std::int32_t id : ids) ASSERT_NE(id, tok.eot_id());

  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 200; ++trial) {
    std::string bytes(std::uniform_int_distribution<int>(0, 100)(rng), '\0');
    for (char& c : bytes) c = static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
    ASSERT_EQ(tok.decode(tok.encode(bytes)), bytes);
    const std::string unicode = testing::random_unicode_text(rng, 30, true);
    ASSERT_EQ(tok.decode(tok.encode(unicode)), unicode);
  }
}

TEST(BpeTrain, IsDeterministic) {
  const std::string text = generated_text(11, 2000);
  const BpeTokenizer a = BpeTokenizer::train(text, 350), b = BpeTokenizer::train(text, 350);
  ASSERT_EQ(a.num_merges(), b.num_merges());
  for (std::int32_t r = 0; r < a.num_merges(); ++r) {
    EXPECT_EQ(a.merges()[r].left, b.merges()[r].left);
    EXPECT_EQ(a.merges()[r].right, b.merges()[r].right);
  }
  EXPECT_EQ(a.encode(text), b.encode(text));
}

TEST(BpeTrain, StopsEarlyWhenNoPairIsLeft) {
  // Pieces "ab", " ab", " ab": merges (a, b) then (' ', ab); then every piece is one token.
  const BpeTokenizer tok = BpeTokenizer::train("ab ab ab", 1000);
  EXPECT_EQ(tok.vocab_size(), 259);
  EXPECT_EQ(tok.num_merges(), 2);
  EXPECT_EQ(tok.token_bytes(256), "ab");
  EXPECT_EQ(tok.token_bytes(257), " ab");
  EXPECT_EQ(tok.eot_id(), 258);
  EXPECT_EQ(tok.encode("ab ab"), (std::vector<std::int32_t>{256, 257}));
  EXPECT_EQ(BpeTokenizer::train("", 300).vocab_size(), 257);
}

TEST(BpeTrain, RejectsTooSmallVocabulary) {
  testing::expect_error_naming([] { (void)BpeTokenizer::train("abc", 256); }, {"vocab_size 256"});
}

TEST(BpeTrain, SaveLoadKeepsTheTrainedTokenizer) {
  const std::string text = generated_text(5, 2000);
  const BpeTokenizer tok = BpeTokenizer::train(text, 330);
  testing::ScratchFile file("trained.bpe");
  tok.save(file.path());
  const BpeTokenizer loaded = BpeTokenizer::load(file.path());
  ASSERT_EQ(loaded.vocab_size(), tok.vocab_size());
  EXPECT_EQ(loaded.eot_id(), tok.eot_id());
  ASSERT_EQ(loaded.num_merges(), tok.num_merges());
  for (std::int32_t id = 0; id < tok.vocab_size(); ++id) ASSERT_EQ(loaded.token_bytes(id), tok.token_bytes(id));
  for (std::int32_t r = 0; r < tok.num_merges(); ++r) {
    EXPECT_EQ(loaded.merges()[r].left, tok.merges()[r].left);
    EXPECT_EQ(loaded.merges()[r].right, tok.merges()[r].right);
    EXPECT_EQ(loaded.merges()[r].result, tok.merges()[r].result);
  }
  EXPECT_EQ(loaded.encode(text), tok.encode(text));
}

}  // namespace
}  // namespace myriad::data
