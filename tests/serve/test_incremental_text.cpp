// IncrementalText: released text is safe to stream (whole UTF-8 characters, never a piece of a
// stop string that may still complete) and ends before the first stop string.
#include "myriad/serve/incremental_text.h"

#include <gtest/gtest.h>

namespace myriad::serve {
namespace {

std::string feed(IncrementalText& text, const std::vector<std::string>& tokens, std::vector<std::string>* released) {
  std::string all;
  for (const std::string& t : tokens) {
    const std::string piece = text.add(t);
    if (released) released->push_back(piece);
    all += piece;
  }
  return all;
}

TEST(IncrementalText, HoldsBackAnUnfinishedCharacter) {
  IncrementalText text;
  std::vector<std::string> released;
  // "é" is C3 A9, "€" is E2 82 AC: split across tokens.
  feed(text, {"a\xC3", "\xA9", "\xE2\x82", "\xAC", "b"}, &released);
  EXPECT_EQ(released, (std::vector<std::string>{"a", "\xC3\xA9", "", "\xE2\x82\xAC", "b"}));
  EXPECT_EQ(text.finish(), "");
}

TEST(IncrementalText, AnUnfinishedCharacterAtTheEndBecomesTheReplacementCharacter) {
  IncrementalText text;
  EXPECT_EQ(text.add("x\xF0\x9F"), "x");
  EXPECT_EQ(text.finish(), "\xEF\xBF\xBD");
}

TEST(IncrementalText, StopsBeforeAStopStringSplitAcrossTokens) {
  IncrementalText text({"END", "\n\n"});
  std::vector<std::string> released;
  const std::string all = feed(text, {"Hello E", "N", "D world"}, &released);
  EXPECT_EQ(all, "Hello ");
  EXPECT_EQ(released[0], "Hello ") << "'E' may begin END: held back";
  EXPECT_TRUE(text.stopped());
  EXPECT_EQ(text.add("more"), "");
  EXPECT_EQ(text.finish(), "");
}

TEST(IncrementalText, ReleasesAHeldPrefixThatDoesNotComplete) {
  IncrementalText text({"END"});
  std::vector<std::string> released;
  const std::string all = feed(text, {"a E", "N", "x"}, &released);
  EXPECT_EQ(released, (std::vector<std::string>{"a ", "", "ENx"}));
  EXPECT_FALSE(text.stopped());
  EXPECT_EQ(all + text.finish(), "a ENx");
}

// Whatever the tokens, the released text is the text up to the first stop string.
TEST(IncrementalText, ReleasedTextIsTheTextUpToTheFirstStop) {
  const std::vector<std::string> alphabet = {"a", "b", "ab", "ba", "\xC3", "\xA9", "c", "bab"};
  std::uint64_t state = 12345;
  for (int trial = 0; trial < 500; ++trial) {
    IncrementalText text({"bab", "cc"});
    std::string whole;
    std::string released;
    for (int i = 0; i < 12; ++i) {
      state = state * 6364136223846793005ull + 1442695040888963407ull;
      const std::string& t = alphabet[(state >> 33) % alphabet.size()];
      whole += t;
      released += text.add(t);
    }
    released += text.finish();
    std::size_t cut = std::min(whole.find("bab"), whole.find("cc"));
    if (cut == std::string::npos) {
      // No stop: everything, with an unfinished last character replaced.
      EXPECT_EQ(released.substr(0, std::min(released.size(), whole.size() - 3)),
                whole.substr(0, std::min(released.size(), whole.size() - 3)));
    } else {
      EXPECT_EQ(released, whole.substr(0, cut)) << "trial " << trial;
    }
  }
}

TEST(IncrementalText, CountsTheBytesOfAnUnfinishedTail) {
  EXPECT_EQ(incomplete_utf8_tail(""), 0u);
  EXPECT_EQ(incomplete_utf8_tail("abc"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("a\xC3"), 1u);
  EXPECT_EQ(incomplete_utf8_tail("a\xC3\xA9"), 0u);
  EXPECT_EQ(incomplete_utf8_tail("\xF0\x9F\x98"), 3u);
  EXPECT_EQ(incomplete_utf8_tail("\xF0\x9F\x98\x80"), 0u);
}

}  // namespace
}  // namespace myriad::serve
