// GPT-2 pre-tokenisation: hand-checked examples of each regex rule, the scanner against GPT-2's
// regex run by ICU's regex engine (random Unicode, Shakespeare), invalid UTF-8, the UTF-8
// decoder and the character classes.
#include <gtest/gtest.h>

#include "myriad/data/pretokenize.h"
#include "reference.h"
#include "tokenizer_test_support.h"

namespace myriad::data {
namespace {

std::vector<std::string> pieces_of(std::string_view text) {
  std::vector<std::string> out;
  for (std::string_view p : pretokenize_gpt2(text)) out.emplace_back(p);
  return out;
}

using Pieces = std::vector<std::string>;

TEST(Pretokenize, Contractions) {
  EXPECT_EQ(pieces_of("it's"), (Pieces{"it", "'s"}));
  EXPECT_EQ(pieces_of("we're they've I'm you'll he'd don't"),
            (Pieces{"we", "'re", " they", "'ve", " I", "'m", " you", "'ll", " he", "'d", " don", "'t"}));
  EXPECT_EQ(pieces_of("IT'S"), (Pieces{"IT", "'", "S"}));  // case-sensitive
  EXPECT_EQ(pieces_of("'sa"), (Pieces{"'s", "a"}));        // no word boundary needed
  EXPECT_EQ(pieces_of("x.'s"), (Pieces{"x", ".'", "s"}));  // only at the start of a piece
  EXPECT_EQ(pieces_of(" 's"), (Pieces{" '", "s"}));
  EXPECT_EQ(pieces_of("''ll"), (Pieces{"''", "ll"}));
}

TEST(Pretokenize, LettersNumbersAndOther) {
  EXPECT_EQ(pieces_of("Hello world"), (Pieces{"Hello", " world"}));
  EXPECT_EQ(pieces_of("123 4567"), (Pieces{"123", " 4567"}));
  EXPECT_EQ(pieces_of(" 3.14159"), (Pieces{" 3", ".", "14159"}));
  EXPECT_EQ(pieces_of("abc123def"), (Pieces{"abc", "123", "def"}));
  EXPECT_EQ(pieces_of("<|endoftext|>"), (Pieces{"<|", "endoftext", "|>"}));
  EXPECT_EQ(pieces_of("a, b!?"), (Pieces{"a", ",", " b", "!?"}));
}

TEST(Pretokenize, WhitespaceRunsLeaveTheirLastCharacterToTheNextPiece) {
  EXPECT_EQ(pieces_of("a   b"), (Pieces{"a", "  ", " b"}));
  EXPECT_EQ(pieces_of("a  "), (Pieces{"a", "  "}));  // a run at the end stays whole
  EXPECT_EQ(pieces_of("hello  world  "), (Pieces{"hello", " ", " world", "  "}));
  EXPECT_EQ(pieces_of("Hello\n\nWorld"), (Pieces{"Hello", "\n", "\n", "World"}));
  EXPECT_EQ(pieces_of("a\n\n b"), (Pieces{"a", "\n\n", " b"}));
  EXPECT_EQ(pieces_of("\n\n"), (Pieces{"\n\n"}));
  EXPECT_EQ(pieces_of("  \t\n"), (Pieces{"  \t\n"}));
  EXPECT_EQ(pieces_of("\t\tx"), (Pieces{"\t", "\t", "x"}));  // only U+0020 joins a word
  EXPECT_EQ(pieces_of("a \tb"), (Pieces{"a", " ", "\t", "b"}));
  EXPECT_EQ(pieces_of(" "), (Pieces{" "}));
  EXPECT_EQ(pieces_of(""), (Pieces{}));
}

TEST(Pretokenize, NonAscii) {
  EXPECT_EQ(pieces_of("naïve résumé"), (Pieces{"naïve", " résumé"}));
  EXPECT_EQ(pieces_of("e\xcc\x81"), (Pieces{"e", "\xcc\x81"}));  // a combining mark is "other"
  EXPECT_EQ(pieces_of("日本語です"), (Pieces{"日本語です"}));
  EXPECT_EQ(pieces_of("\xf0\x9f\x98\x80!"), (Pieces{"\xf0\x9f\x98\x80!"}));
  EXPECT_EQ(pieces_of(" \xf0\x9f\x98\x80"), (Pieces{" \xf0\x9f\x98\x80"}));
  EXPECT_EQ(pieces_of("x\xc2\xa0y"), (Pieces{"x", "\xc2\xa0", "y"}));          // NBSP is \s
  EXPECT_EQ(pieces_of("x\xe2\x80\x8by"), (Pieces{"x", "\xe2\x80\x8b", "y"}));  // ZWSP is not
  EXPECT_EQ(pieces_of("\xd9\xa3\xd9\xa4 \xc2\xbd"), (Pieces{"\xd9\xa3\xd9\xa4", " \xc2\xbd"}));
}

TEST(Pretokenize, InvalidUtf8BytesAreOtherCharacters) {
  EXPECT_EQ(pieces_of("a\xff\xfe"
                      "b"),
            (Pieces{"a", "\xff\xfe", "b"}));
  EXPECT_EQ(pieces_of(" \xff"), (Pieces{" \xff"}));
  EXPECT_EQ(pieces_of("\xc3\xa9\xc3"), (Pieces{"\xc3\xa9", "\xc3"}));    // truncated
  EXPECT_EQ(pieces_of("\xed\xa0\x80x"), (Pieces{"\xed\xa0\x80", "x"}));  // surrogate
  EXPECT_EQ(pieces_of("\xc0\xaf"
                      "a"),
            (Pieces{"\xc0\xaf", "a"}));                                    // overlong
  EXPECT_EQ(pieces_of("\xf4\x90\x80\x80"), (Pieces{"\xf4\x90\x80\x80"}));  // above U+10FFFF
}

TEST(Pretokenize, PiecesCoverRandomBytes) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 500; ++trial) {
    std::string text(std::uniform_int_distribution<int>(0, 64)(rng), '\0');
    for (char& c : text) c = static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
    std::string joined;
    for (std::string_view p : pretokenize_gpt2(text)) {
      ASSERT_FALSE(p.empty());
      joined += p;
    }
    ASSERT_EQ(joined, text);
  }
}

TEST(Pretokenize, MatchesGpt2RegexOnRandomUnicode) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  testing::RegexPretokenizer regex;
  for (int trial = 0; trial < 2000; ++trial) {
    const std::string text = testing::random_unicode_text(rng, 40, trial % 4 == 0);
    ASSERT_EQ(pieces_of(text), regex.split(text)) << "text: \"" << text << "\"";
  }
}

TEST(Pretokenize, MatchesGpt2RegexOnShakespeare) {
  if (!std::filesystem::exists(testing::shakespeare_path()))
    GTEST_SKIP() << testing::shakespeare_path() << " not found (set MYRIAD_SHARED_DATA)";
  const std::string text = testing::read_whole_file(testing::shakespeare_path());
  const Pieces expected = testing::RegexPretokenizer().split(text);
  const Pieces actual = pieces_of(text);
  ASSERT_EQ(actual.size(), expected.size());
  for (std::size_t i = 0; i < actual.size(); ++i) ASSERT_EQ(actual[i], expected[i]) << "piece " << i;
}

// Cutting at next_safe_split keeps the pieces: checked against pre-tokenising the whole text,
// on Shakespeare-like lines and on random text full of whitespace runs.
TEST(Pretokenize, SafeSplitsKeepThePieces) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  const std::vector<std::string> parts = {
      "First Citizen:",    "\n", "\n\n", "We are", " accounted poor.", "\n ", " \n", "'s", "\t", "\xc2\xa0",
      "\xc3\xa9t\xc3\xa9", "42", "!",    "  ",     "end.\nNext"};
  std::size_t splits_seen = 0;
  for (int trial = 0; trial < 300; ++trial) {
    std::string text;
    for (int i = std::uniform_int_distribution<int>(0, 30)(rng); i > 0; --i)
      text += parts[std::uniform_int_distribution<std::size_t>(0, parts.size() - 1)(rng)];
    const std::size_t start = std::uniform_int_distribution<std::size_t>(0, text.size())(rng);
    const std::size_t cut = next_safe_split(text, start);
    ASSERT_GE(cut, start);
    ASSERT_LE(cut, text.size());
    if (cut == text.size()) continue;
    ++splits_seen;
    ASSERT_EQ(text[cut - 1], '\n');
    Pieces joined = pieces_of(std::string_view(text).substr(0, cut));
    for (std::string& p : pieces_of(std::string_view(text).substr(cut))) joined.push_back(std::move(p));
    ASSERT_EQ(joined, pieces_of(text)) << "cut at " << cut << " of \"" << text << "\"";
  }
  EXPECT_GT(splits_seen, 30u);
  EXPECT_EQ(next_safe_split("a\n\nb", 0), 4u);  // no cut inside "\n\n": none at all here
  EXPECT_EQ(next_safe_split("ab.\nCd", 0), 4u);
  EXPECT_EQ(next_safe_split("ab.\nCd", 5), 6u);
}

TEST(Pretokenize, DecodeUtf8) {
  struct Case {
    std::string bytes;
    char32_t cp;
    std::size_t length;
    bool valid;
  };
  const std::vector<Case> cases = {
      {"A", U'A', 1, true},
      {"\xc3\xa9", U'\u00e9', 2, true},
      {"\xe4\xb8\xad", U'\u4e2d', 3, true},
      {"\xf0\x9f\x98\x80", U'\U0001F600', 4, true},
      {"\xf4\x8f\xbf\xbf", U'\U0010FFFF', 4, true},
      {"\x80", 0x80, 1, false},              // lone continuation byte
      {"\xc3", 0xC3, 1, false},              // truncated
      {"\xc3(", 0xC3, 1, false},             // bad continuation
      {"\xc1\xbf", 0xC1, 1, false},          // overlong 2-byte
      {"\xe0\x9f\xbf", 0xE0, 1, false},      // overlong 3-byte
      {"\xed\xa0\x80", 0xED, 1, false},      // surrogate
      {"\xf0\x8f\xbf\xbf", 0xF0, 1, false},  // overlong 4-byte
      {"\xf4\x90\x80\x80", 0xF4, 1, false},  // above U+10FFFF
      {"\xff", 0xFF, 1, false},
  };
  for (const Case& c : cases) {
    std::size_t length = 0;
    bool valid = !c.valid;
    const char32_t cp = decode_utf8(c.bytes, 0, length, valid);
    EXPECT_EQ(valid, c.valid) << testing::reference_spelling(c.bytes);
    EXPECT_EQ(length, c.length) << testing::reference_spelling(c.bytes);
    if (c.valid) {
      EXPECT_EQ(static_cast<std::uint32_t>(cp), static_cast<std::uint32_t>(c.cp));
    }
  }
}

TEST(Pretokenize, CharacterClasses) {
  EXPECT_EQ(classify_code_point(U'a'), CharClass::letter);
  EXPECT_EQ(classify_code_point(U'\u00e9'), CharClass::letter);
  EXPECT_EQ(classify_code_point(U'\u4e2d'), CharClass::letter);
  EXPECT_EQ(classify_code_point(U'\u02b0'), CharClass::letter);  // Lm
  EXPECT_EQ(classify_code_point(U'7'), CharClass::number);
  EXPECT_EQ(classify_code_point(U'\u0663'), CharClass::number);  // Nd
  EXPECT_EQ(classify_code_point(U'\u00bd'), CharClass::number);  // No
  EXPECT_EQ(classify_code_point(U'\u2167'), CharClass::number);  // Nl
  for (char32_t s : {U'\t', U'\n', U'\v', U'\f', U'\r', U' ', U'\u0085', U'\u00a0', U'\u1680', U'\u2000', U'\u200a',
                     U'\u2028', U'\u2029', U'\u202f', U'\u205f', U'\u3000'})
    EXPECT_EQ(classify_code_point(s), CharClass::space) << static_cast<std::uint32_t>(s);
  for (char32_t o : {U'\x1c', U'\x1f', U'\u200b', U'\ufeff', U'\u0301', U'\U0001F600', U'\'', U'_', U'\0'})
    EXPECT_EQ(classify_code_point(o), CharClass::other) << static_cast<std::uint32_t>(o);
}

}  // namespace
}  // namespace myriad::data
