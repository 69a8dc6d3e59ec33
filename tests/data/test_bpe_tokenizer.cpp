// BpeTokenizer with GPT-2's files: ids of hand-picked cases derived from encoder.json (token
// spellings looked up there, never typed as numbers), and the fast encoder against a naive
// reference GPT-2 encoder (ICU regex + string bpe() loop, tokenizer_test_support.h) on all of
// tinyshakespeare and on random Unicode; round trips, decode errors, concurrency, save / load.
// Skips when the GPT-2 files are absent.
#include <gtest/gtest.h>

#include <thread>

#include "myriad/data/bpe_tokenizer.h"
#include "reference.h"
#include "test_helpers.h"
#include "tokenizer_test_support.h"

namespace myriad::data {
namespace {

using Tokens = std::vector<std::string>;  // raw bytes of each expected token

class Gpt2Tokenizer : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!testing::gpt2_files_present()) return;
    tokenizer_ = new BpeTokenizer(BpeTokenizer::load_gpt2(testing::gpt2_encoder_path(), testing::gpt2_vocab_path()));
    reference_ = new testing::ReferenceGpt2(testing::gpt2_encoder_path(), testing::gpt2_vocab_path());
  }
  static void TearDownTestSuite() {
    delete tokenizer_;
    delete reference_;
    tokenizer_ = nullptr;
    reference_ = nullptr;
  }
  void SetUp() override {
    if (tokenizer_ == nullptr) GTEST_SKIP() << testing::gpt2_missing_message();
  }
  const BpeTokenizer& tok() const { return *tokenizer_; }
  testing::ReferenceGpt2& ref() const { return *reference_; }

  // encode(text) must be exactly the ids of `expected` (each looked up in encoder.json) and
  // agree with the reference encoder.
  void expect_tokens(const std::string& text, const Tokens& expected) const {
    SCOPED_TRACE("text \"" + text + "\"");
    const std::vector<std::int32_t> ids = tok().encode(text);
    EXPECT_EQ(ids, ref().ids(expected));
    EXPECT_EQ(ids, ref().encode(text));
    EXPECT_EQ(tok().decode(ids), text);
  }

  static BpeTokenizer* tokenizer_;
  static testing::ReferenceGpt2* reference_;
};

BpeTokenizer* Gpt2Tokenizer::tokenizer_ = nullptr;
testing::ReferenceGpt2* Gpt2Tokenizer::reference_ = nullptr;

TEST_F(Gpt2Tokenizer, VocabularyMatchesTheFiles) {
  EXPECT_EQ(static_cast<std::size_t>(tok().vocab_size()), ref().encoder_size());
  EXPECT_EQ(static_cast<std::size_t>(tok().num_merges()), ref().merge_count());
  EXPECT_EQ(tok().eot_id(), ref().special_id("<|endoftext|>"));
  EXPECT_EQ(tok().token_bytes(ref().id(" world")), " world");
  for (int b = 0; b < 256; ++b) {
    const std::string byte(1, static_cast<char>(b));
    EXPECT_EQ(tok().encode(byte), std::vector<std::int32_t>{ref().id(byte)}) << "byte " << b;
  }
}

TEST_F(Gpt2Tokenizer, Words) {
  expect_tokens("Hello world", {"Hello", " world"});
  expect_tokens("Hello, world!", {"Hello", ",", " world", "!"});
}

TEST_F(Gpt2Tokenizer, Contractions) {
  expect_tokens("it's", {"it", "'s"});
  expect_tokens("we're they've I'm you'll he'd don't",
                {"we", "'re", " they", "'ve", " I", "'m", " you", "'ll", " he", "'d", " don", "'t"});
  expect_tokens("IT'S", {"IT", "'", "S"});  // upper case is not a contraction
  expect_tokens("'sa", {"'s", "a"});
  expect_tokens(" 's", {" '", "s"});
}

TEST_F(Gpt2Tokenizer, Digits) {
  expect_tokens("123 4567", {"123", " 45", "67"});
  expect_tokens("2024", {"20", "24"});
  expect_tokens(" 3.14159", {" 3", ".", "14", "159"});
  expect_tokens(" 123", {" 123"});
}

TEST_F(Gpt2Tokenizer, WhitespaceRuns) {
  expect_tokens("a   b", {"a", " ", " ", " b"});
  expect_tokens("a  ", {"a", " ", " "});
  expect_tokens("hello  world  ", {"hello", " ", " world", " ", " "});
  expect_tokens("Hello\n\nWorld", {"Hello", "\n", "\n", "World"});
  expect_tokens("a\n\n b", {"a", "\n\n", " b"});
  expect_tokens("\n\n", {"\n\n"});
  expect_tokens("  \t\n", {" ", " ", "\t", "\n"});
  expect_tokens("\t\tx", {"\t", "\t", "x"});
}

TEST_F(Gpt2Tokenizer, NonAscii) {
  expect_tokens("café", {"c", "af", "\xc3\xa9"});
  expect_tokens("naïve résumé", {"na", "\xc3\xafve", " r\xc3\xa9", "sum", "\xc3\xa9"});
  expect_tokens("日本語", {"\xe6\x97", "\xa5", "\xe6\x9c", "\xac", "\xe8\xaa", "\x9e"});
  expect_tokens("\xf0\x9f\x98\x80", {"\xf0\x9f\x98", "\x80"});
  expect_tokens("e\xcc\x81", {"e", "\xcc", "\x81"});
}

TEST_F(Gpt2Tokenizer, EmptyString) {
  EXPECT_TRUE(tok().encode("").empty());
  EXPECT_EQ(tok().decode({}), "");
}

TEST_F(Gpt2Tokenizer, EndOfTextInTextIsOrdinaryText) {
  const std::vector<std::int32_t> ids = tok().encode("<|endoftext|>");
  expect_tokens("<|endoftext|>", {"<", "|", "end", "of", "text", "|", ">"});
  EXPECT_EQ(std::count(ids.begin(), ids.end(), tok().eot_id()), 0);
  EXPECT_EQ(tok().decode({tok().eot_id()}), "<|endoftext|>");
}

TEST_F(Gpt2Tokenizer, AllowingSpecialMapsEachLiteralEndOfTextToTheEotId) {
  // Hugging Face's GPT-2 tokenizer (and tiktoken with allowed_special): one id 50256 per literal.
  const BpeTokenizer& t = tok();
  std::vector<std::int32_t> want = t.encode("Hello world");
  want.push_back(t.eot_id());
  const std::vector<std::int32_t> tail = t.encode(" Bye<|endof");
  want.insert(want.end(), tail.begin(), tail.end());
  EXPECT_EQ(t.encode_allowing_special("Hello world<|endoftext|> Bye<|endof"), want);
  EXPECT_EQ(t.eot_id(), 50256);
  EXPECT_EQ(t.encode_allowing_special("<|endoftext|><|endoftext|>"), (std::vector<std::int32_t>{50256, 50256}));
  EXPECT_TRUE(t.encode_allowing_special("").empty());
  const std::string text = "a<|endoftext|>b";
  EXPECT_EQ(t.decode(t.encode_allowing_special(text)), text);  // round trip either way
  EXPECT_EQ(t.decode(t.encode(text)), text);
}

TEST_F(Gpt2Tokenizer, MatchesReferenceOnShakespeare) {
  if (!std::filesystem::exists(testing::shakespeare_path()))
    GTEST_SKIP() << testing::shakespeare_path() << " not found (set MYRIAD_SHARED_DATA)";
  const std::string text = testing::read_whole_file(testing::shakespeare_path());
  const std::vector<std::int32_t> ids = tok().encode(text);
  const std::vector<std::int32_t> expected = ref().encode(text);
  ASSERT_EQ(ids.size(), expected.size());
  for (std::size_t i = 0; i < ids.size(); ++i) ASSERT_EQ(ids[i], expected[i]) << "token " << i;
  EXPECT_EQ(tok().decode(ids), text);
}

TEST_F(Gpt2Tokenizer, MatchesReferenceOnRandomUnicode) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 1500; ++trial) {
    const std::string text = testing::random_unicode_text(rng, 40, trial % 3 == 0);
    const std::vector<std::int32_t> ids = tok().encode(text);
    ASSERT_EQ(ids, ref().encode(text)) << "text: \"" << text << "\"";
    ASSERT_EQ(tok().decode(ids), text);
  }
}

TEST_F(Gpt2Tokenizer, LongPiecesMatchReference) {
  // Pieces longer than 64 bytes take the heap-based merge path.
  for (const std::string& text : {std::string(200, 'a'), std::string(1000, ' ') + "x", std::string(97, '7'),
                                  std::string(150, '!'), "super" + std::string(80, 'c') + "alifragilistic"}) {
    EXPECT_EQ(tok().encode(text), ref().encode(text)) << "text of " << text.size() << " bytes";
  }
}

TEST_F(Gpt2Tokenizer, RoundTripsArbitraryBytes) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  for (int trial = 0; trial < 500; ++trial) {
    std::string text(std::uniform_int_distribution<int>(0, 200)(rng), '\0');
    for (char& c : text) c = static_cast<char>(std::uniform_int_distribution<int>(0, 255)(rng));
    const std::vector<std::int32_t> ids = tok().encode(text);
    for (std::int32_t id : ids) ASSERT_TRUE(id >= 0 && id < tok().vocab_size() && id != tok().eot_id());
    ASSERT_EQ(tok().decode(ids), text);
  }
}

TEST_F(Gpt2Tokenizer, DecodeThrowsNamingTheId) {
  const std::int32_t n = tok().vocab_size();
  testing::expect_error_naming([&] { (void)tok().decode({0, n}); }, {"id " + std::to_string(n), "position 1"});
  testing::expect_error_naming([&] { (void)tok().decode({-1}); }, {"id -1", "position 0"});
}

TEST_F(Gpt2Tokenizer, ConcurrentEncodeMatchesSerial) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  std::mt19937_64 rng(seed);
  std::vector<std::string> texts;
  texts.reserve(64);
  for (int i = 0; i < 64; ++i) texts.push_back(testing::random_unicode_text(rng, 400, i % 2 == 0));
  std::vector<std::vector<std::int32_t>> serial;
  serial.reserve(texts.size());
  for (const std::string& t : texts) serial.push_back(tok().encode(t));
  std::vector<std::vector<std::int32_t>> parallel(texts.size());
  std::vector<std::thread> threads;
  threads.reserve(4);
  for (int w = 0; w < 4; ++w)
    threads.emplace_back([&, w] {
      for (int rep = 0; rep < 5; ++rep)
        for (std::size_t i = w; i < texts.size(); i += 4) parallel[i] = tok().encode(texts[i]);
    });
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(parallel, serial);
}

TEST_F(Gpt2Tokenizer, SaveLoadGivesTheSameTokenizer) {
  testing::ScratchFile file("gpt2.bpe");
  tok().save(file.path());
  const BpeTokenizer loaded = BpeTokenizer::load(file.path());
  ASSERT_EQ(loaded.vocab_size(), tok().vocab_size());
  EXPECT_EQ(loaded.eot_id(), tok().eot_id());
  for (std::int32_t id = 0; id < tok().vocab_size(); ++id) ASSERT_EQ(loaded.token_bytes(id), tok().token_bytes(id));
  ASSERT_EQ(loaded.num_merges(), tok().num_merges());
  for (std::size_t r = 0; r < tok().merges().size(); ++r) {
    ASSERT_EQ(loaded.merges()[r].left, tok().merges()[r].left);
    ASSERT_EQ(loaded.merges()[r].right, tok().merges()[r].right);
    ASSERT_EQ(loaded.merges()[r].result, tok().merges()[r].result);
  }
  const std::string text = "Saving and loading keeps every id: it's 2024, na\xc3\xafve \xf0\x9f\x98\x80\n\n";
  EXPECT_EQ(loaded.encode(text), tok().encode(text));
}

}  // namespace
}  // namespace myriad::data
