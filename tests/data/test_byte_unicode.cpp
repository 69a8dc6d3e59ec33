// byte_to_unicode / unicode_to_byte against a line-by-line port of OpenAI's bytes_to_unicode,
// and the string conversions (round trip, rejection of strings outside the map).
#include <gtest/gtest.h>

#include <set>

#include "myriad/data/byte_unicode.h"
#include "tokenizer_test_support.h"

namespace myriad::data {
namespace {

TEST(ByteUnicode, MatchesOpenAiBytesToUnicode) {
  const std::vector<char32_t> expected = testing::reference_byte_map();
  std::set<char32_t> seen;
  for (int b = 0; b < 256; ++b) {
    SCOPED_TRACE("byte " + std::to_string(b));
    EXPECT_EQ(byte_to_unicode(static_cast<std::uint8_t>(b)), expected[b]);
    EXPECT_EQ(unicode_to_byte(expected[b]), b);
    seen.insert(byte_to_unicode(static_cast<std::uint8_t>(b)));
  }
  EXPECT_EQ(seen.size(), 256u) << "the map must be a bijection";
  // The spellings everyone knows from GPT-2's files.
  EXPECT_EQ(byte_to_unicode(' '), U'\u0120');   // 'Ġ'
  EXPECT_EQ(byte_to_unicode('\n'), U'\u010A');  // 'Ċ'
  EXPECT_EQ(byte_to_unicode('A'), U'A');
}

TEST(ByteUnicode, CodePointsOutsideTheMapHaveNoByte) {
  for (char32_t cp : {U'\0', U' ', U'\n', U'\x7f', U'\xa0', U'\xad', U'\u0144', U'\u4e2d', U'\U0001F600'})
    EXPECT_EQ(unicode_to_byte(cp), -1) << "code point " << static_cast<std::uint32_t>(cp);
}

TEST(ByteUnicode, StringConversionsRoundTripEveryByte) {
  std::string all;
  for (int b = 0; b < 256; ++b) all.push_back(static_cast<char>(b));
  const std::string spelled = bytes_to_unicode_string(all);
  EXPECT_EQ(spelled, testing::reference_spelling(all));
  std::string back;
  ASSERT_TRUE(unicode_string_to_bytes(spelled, back));
  EXPECT_EQ(back, all);
  EXPECT_EQ(bytes_to_unicode_string(" world"), "\xc4\xa0world");
}

TEST(ByteUnicode, RejectsStringsOutsideTheMap) {
  std::string bytes;
  EXPECT_FALSE(unicode_string_to_bytes("a b", bytes));           // a raw space is not a spelling
  EXPECT_FALSE(unicode_string_to_bytes("\xe4\xb8\xad", bytes));  // U+4E2D
  EXPECT_FALSE(unicode_string_to_bytes("\xc4", bytes));          // truncated UTF-8
  EXPECT_FALSE(unicode_string_to_bytes("\xc0\xa0", bytes));      // overlong UTF-8
  EXPECT_TRUE(unicode_string_to_bytes("", bytes));
  EXPECT_TRUE(bytes.empty());
}

}  // namespace
}  // namespace myriad::data
