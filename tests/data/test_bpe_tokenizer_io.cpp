// BpeTokenizer files on small synthetic vocabularies (no shared data needed): GPT-2 format
// loading and encoding, myriad's format save / load, and every reading error naming the file
// and the line.
#include <gtest/gtest.h>

#include "myriad/data/bpe_tokenizer.h"
#include "test_helpers.h"
#include "tokenizer_test_support.h"

namespace myriad::data {
namespace {

using testing::expect_error_naming;
using testing::ScratchFile;

// encoder.json with one entry per line: line 1 "{", entry k on line k + 2, "}" last.
// Entries: the 256 byte spellings (ids 0..255), then `extra` tokens, then "<|endoftext|>".
std::string encoder_json(const std::vector<std::string>& extra_spellings, int skip_byte = -1) {
  std::vector<std::string> keys;
  for (int b = 0; b < 256; ++b)
    if (b != skip_byte) keys.push_back(testing::reference_spelling(std::string(1, static_cast<char>(b))));
  keys.insert(keys.end(), extra_spellings.begin(), extra_spellings.end());
  keys.emplace_back("<|endoftext|>");
  std::string out = "{\n";
  for (std::size_t id = 0; id < keys.size(); ++id)
    out += nlohmann::json(keys[id]).dump() + ": " + std::to_string(id) + (id + 1 < keys.size() ? ",\n" : "\n");
  return out + "}\n";
}

const std::vector<std::string> kHelloTokens = {"he", "ll", "hell", "hello"};  // ids 256..259, eot 260
const std::string kHelloMerges = "#version: 0.2\nh e\nl l\nhe ll\nhell o\n";

std::string load_error(const std::string& encoder, const std::string& merges) {
  ScratchFile enc("encoder.json", encoder), bpe("vocab.bpe", merges);
  try {
    (void)BpeTokenizer::load_gpt2(enc.path(), bpe.path());
  } catch (const Error& e) {
    return std::string(e.what());
  }
  ADD_FAILURE() << "expected load_gpt2 to throw";
  return "";
}

TEST(BpeTokenizerFiles, LoadsASmallGpt2StyleVocabulary) {
  ScratchFile enc("encoder.json", encoder_json(kHelloTokens)), bpe("vocab.bpe", kHelloMerges);
  const BpeTokenizer tok = BpeTokenizer::load_gpt2(enc.path(), bpe.path());
  EXPECT_EQ(tok.vocab_size(), 261);
  EXPECT_EQ(tok.eot_id(), 260);
  EXPECT_EQ(tok.num_merges(), 4);
  EXPECT_EQ(tok.encode("hello"), (std::vector<std::int32_t>{259}));
  EXPECT_EQ(tok.encode("hell"), (std::vector<std::int32_t>{258}));
  // In this file token id b is the byte b. " hello" is one piece; ' ' has no merge.
  EXPECT_EQ(tok.encode(" hello"), (std::vector<std::int32_t>{' ', 259}));
  EXPECT_EQ(tok.encode("hel"), (std::vector<std::int32_t>{256, 'l'}));
  EXPECT_EQ(tok.encode("llo"), (std::vector<std::int32_t>{257, 'o'}));
  EXPECT_EQ(tok.decode(tok.encode(" hello hel")), " hello hel");
}

TEST(BpeTokenizerFiles, SaveWritesTheDocumentedFormatAndLoadRestoresIt) {
  ScratchFile enc("encoder.json", encoder_json(kHelloTokens)), bpe("vocab.bpe", kHelloMerges);
  const BpeTokenizer tok = BpeTokenizer::load_gpt2(enc.path(), bpe.path());
  ScratchFile saved("small.bpe");
  tok.save(saved.path());
  const std::string text = testing::read_whole_file(saved.path());
  EXPECT_EQ(text.rfind("myriad-bpe 1\ntokens 261\neot 260\nmerges 4\n", 0), 0u) << text.substr(0, 60);
  // Token 256 is "he" = 68 65 in hex, on line 5 + 256; the first merge is (h, e) by id.
  EXPECT_NE(text.find("\n6865\n"), std::string::npos);
  EXPECT_NE(text.find("\n104 101\n"), std::string::npos);
  const BpeTokenizer loaded = BpeTokenizer::load(saved.path());
  EXPECT_EQ(loaded.vocab_size(), 261);
  EXPECT_EQ(loaded.eot_id(), 260);
  EXPECT_EQ(loaded.encode("hello hell"), tok.encode("hello hell"));
}

TEST(BpeTokenizerFiles, MissingFilesAreNamed) {
  ScratchFile enc("encoder.json", encoder_json(kHelloTokens)), bpe("vocab.bpe", kHelloMerges);
  expect_error_naming([&] { (void)BpeTokenizer::load_gpt2("/nonexistent/encoder.json", bpe.path()); },
                      {"/nonexistent/encoder.json", "cannot open"});
  expect_error_naming([&] { (void)BpeTokenizer::load_gpt2(enc.path(), "/nonexistent/vocab.bpe"); },
                      {"/nonexistent/vocab.bpe", "cannot open"});
  expect_error_naming([&] { (void)BpeTokenizer::load("/nonexistent/tok.bpe"); },
                      {"/nonexistent/tok.bpe", "cannot open"});
}

TEST(BpeTokenizerFiles, MalformedJsonNamesFileAndLine) {
  ScratchFile enc("encoder.json", "{\n\"a\": 0,\n\"b\": ,\n}\n"), bpe("vocab.bpe", kHelloMerges);
  expect_error_naming([&] { (void)BpeTokenizer::load_gpt2(enc.path(), bpe.path()); },
                      {enc.path() + ":3:", "malformed JSON"});
}

TEST(BpeTokenizerFiles, EncoderSemanticErrorsNameFileAndLine) {
  std::string enc = encoder_json(kHelloTokens);
  // Entry k sits on line k + 2. Make token "hell" (id 258, line 260) map to a string.
  std::string bad_value = enc;
  bad_value.replace(bad_value.find("\"hell\": 258"), 11, "\"hell\": \"x\"");
  std::string msg = load_error(bad_value, kHelloMerges);
  EXPECT_NE(msg.find(":260:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("\"hell\""), std::string::npos) << msg;

  std::string duplicate_id = enc;
  duplicate_id.replace(duplicate_id.find("\"hell\": 258"), 11, "\"hell\": 257");
  msg = load_error(duplicate_id, kHelloMerges);
  EXPECT_NE(msg.find(":260:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("257"), std::string::npos) << msg;

  std::string out_of_range = enc;
  out_of_range.replace(out_of_range.find("\"hell\": 258"), 11, "\"hell\": 999");
  msg = load_error(out_of_range, kHelloMerges);
  EXPECT_NE(msg.find(":260:"), std::string::npos) << msg;
  EXPECT_NE(msg.find("999"), std::string::npos) << msg;

  std::string not_byte_level = enc;
  not_byte_level.replace(not_byte_level.find("\"hell\": 258"), 11, "\"h ll\": 258");  // raw space
  msg = load_error(not_byte_level, kHelloMerges);
  EXPECT_NE(msg.find(":260:"), std::string::npos) << msg;

  std::string no_eot = enc;
  no_eot.replace(no_eot.find("<|endoftext|>"), 13, "<|other|>");
  msg = load_error(no_eot, kHelloMerges);
  EXPECT_NE(msg.find("<|endoftext|>"), std::string::npos) << msg;

  msg = load_error(encoder_json(kHelloTokens, 'z'), kHelloMerges);
  EXPECT_NE(msg.find("single byte 122"), std::string::npos) << msg;

  msg = load_error("[1, 2]\n", kHelloMerges);
  EXPECT_NE(msg.find(":1:"), std::string::npos) << msg;
}

TEST(BpeTokenizerFiles, MergeErrorsNameFileAndLine) {
  const std::string enc = encoder_json(kHelloTokens);
  ScratchFile enc_file("encoder.json", enc);
  const auto expect_merge_error = [&](const std::string& merges, const std::string& line, const std::string& word) {
    ScratchFile bpe("vocab.bpe", merges);
    expect_error_naming([&] { (void)BpeTokenizer::load_gpt2(enc_file.path(), bpe.path()); },
                        {bpe.path() + ":" + line + ":", word});
  };
  expect_merge_error("#version: 0.2\nh e\nh QQ\n", "3", "unknown token \"QQ\"");
  expect_merge_error("#version: 0.2\nh e\nl l x\n", "3", "expected a merge");
  expect_merge_error("#version: 0.2\nh e\n\nl l\n", "3", "expected a merge");
  expect_merge_error("#version: 0.2\nh e\ne h\n", "3", "\"eh\" is not a token");
  expect_merge_error("#version: 0.2\nh e\nl l\nh e\n", "4", "repeats merge 0");
  expect_merge_error("h e\nl l\nh QQ\n", "3", "unknown token");  // no version line
}

TEST(BpeTokenizerFiles, MyriadFormatErrorsNameFileAndLine) {
  ScratchFile enc("encoder.json", encoder_json(kHelloTokens)), bpe("vocab.bpe", kHelloMerges);
  ScratchFile saved("small.bpe");
  BpeTokenizer::load_gpt2(enc.path(), bpe.path()).save(saved.path());
  const std::string good = testing::read_whole_file(saved.path());
  const auto expect_load_error = [&](const std::string& contents, std::initializer_list<std::string> needles) {
    ScratchFile file("bad.bpe", contents);
    std::vector<std::string> all{file.path()};
    all.insert(all.end(), needles.begin(), needles.end());
    try {
      (void)BpeTokenizer::load(file.path());
      ADD_FAILURE() << "expected load to throw";
    } catch (const Error& e) {
      for (const std::string& needle : all)
        EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << "'" << needle << "' not in " << e.what();
    }
  };
  const auto replace_line = [&](std::size_t line, const std::string& with) {
    std::string text = good;
    std::size_t begin = 0;
    for (std::size_t i = 1; i < line; ++i) begin = text.find('\n', begin) + 1;
    text.replace(begin, text.find('\n', begin) - begin, with);
    return text;
  };
  expect_load_error("not a tokenizer\n", {":1:", "not a myriad BPE file"});
  expect_load_error(replace_line(1, "myriad-bpe 2"), {":1:", "version 2"});
  expect_load_error(replace_line(2, "tokens many"), {":2:", "tokens"});
  expect_load_error(good.substr(0, good.rfind('\n', good.size() - 2) + 1), {"expected 269 lines", "found 268"});
  expect_load_error(replace_line(5 + 256, "6g65"), {":261:", "token 256", "hex"});
  expect_load_error(replace_line(5 + 261 + 1, "0 999"), {":267:", "unknown token 999"});
  expect_load_error(replace_line(5 + 261 + 1, "0 1"), {":267:", "merge 1", "not a token"});
  expect_load_error(replace_line(5 + 257, "6865"), {":262:", "token 257", "same bytes as token 256"});
}

}  // namespace
}  // namespace myriad::data
