// Document sources: text, JSONL and zstd-compressed JSONL give the documents written into them,
// in order; every kind of bad input is skipped and counted with the file and line (or compressed
// byte) named; a document larger than the limit is reported, not held; UTF-8 validation against
// hand-made cases (overlong forms, surrogates, code points past U+10FFFF, truncated sequences).
#include <gtest/gtest.h>
#include <zstd.h>

#include <string>
#include <vector>

#include "myriad/data/document_source.h"
#include "temp_dir.h"

namespace myriad::data {
namespace {

using testing::TempDir;
using testing::write_bytes;

std::vector<std::string> read_all(const std::string& path, const SourceOptions& options, InputReport& report) {
  std::vector<std::string> documents;
  for_each_file_document(path, options, report, [&](std::string_view d) { documents.emplace_back(d); });
  return documents;
}

std::string zstd_compress(const std::string& text, int level = 3) {
  std::string out(ZSTD_compressBound(text.size()), '\0');
  const std::size_t size = ZSTD_compress(out.data(), out.size(), text.data(), text.size(), level);
  EXPECT_FALSE(ZSTD_isError(size));
  out.resize(size);
  return out;
}

std::string jsonl_of(const std::vector<std::string>& texts) {
  std::string out;
  for (const std::string& t : texts) out += "{\"id\": 1, \"text\": \"" + t + "\"}\n";
  return out;
}

TEST(DocumentSource, FormatsComeFromTheFileName) {
  EXPECT_EQ(file_format_of("a/b.jsonl").format, InputFormat::jsonl);
  EXPECT_FALSE(file_format_of("a/b.jsonl").zstd);
  EXPECT_EQ(file_format_of("b.jsonl.zst").format, InputFormat::jsonl);
  EXPECT_TRUE(file_format_of("b.jsonl.zst").zstd);
  EXPECT_TRUE(file_format_of("b.txt.zstd").zstd);
  EXPECT_EQ(file_format_of("b.txt.zstd").format, InputFormat::text);
  EXPECT_EQ(file_format_of("README").format, InputFormat::text);
}

TEST(DocumentSource, Utf8ValidationFindsTheFirstBadByte) {
  EXPECT_EQ(first_invalid_utf8("plain ascii"), std::string_view::npos);
  EXPECT_EQ(first_invalid_utf8("caf\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80"), std::string_view::npos);
  EXPECT_EQ(first_invalid_utf8("ab\x80"), 2u);              // stray continuation byte
  EXPECT_EQ(first_invalid_utf8("a\xc0\xaf"), 1u);           // overlong '/'
  EXPECT_EQ(first_invalid_utf8("a\xe0\x80\xaf"), 1u);       // overlong, three bytes
  EXPECT_EQ(first_invalid_utf8("\xed\xa0\x80"), 0u);        // surrogate U+D800
  EXPECT_EQ(first_invalid_utf8("xy\xf4\x90\x80\x80"), 2u);  // U+110000
  EXPECT_EQ(first_invalid_utf8("abc\xe2\x82"), 3u);         // truncated at the end
  EXPECT_EQ(first_invalid_utf8("\xff"), 0u);
  EXPECT_EQ(first_invalid_utf8(std::string("nul\0ok", 6)), std::string_view::npos);
}

TEST(DocumentSource, TextFilesAreOneDocumentOrSplitBySeparatorLines) {
  TempDir dir;
  write_bytes(dir / "one.txt", "first line\nsecond line\n");
  write_bytes(dir / "many.txt", "a\nb\n%\r\nc\n%\n%\nd");
  InputReport report;
  EXPECT_EQ(read_all(dir / "one.txt", {}, report), (std::vector<std::string>{"first line\nsecond line\n"}));
  SourceOptions split;
  split.separator = "%";
  EXPECT_EQ(read_all(dir / "many.txt", split, report), (std::vector<std::string>{"a\nb\n", "c\n", "d\n"}));
  EXPECT_EQ(report.files, 2);
  EXPECT_EQ(report.documents, 4);
  EXPECT_EQ(report.empty_documents, 1);  // between the two "%" lines
  EXPECT_EQ(report.problem_count(), 0);
}

TEST(DocumentSource, JsonlAndCompressedJsonlGiveTheSameDocuments) {
  TempDir dir;
  std::vector<std::string> texts;
  texts.reserve(5000);
  for (int i = 0; i < 5000; ++i) texts.push_back("document " + std::to_string(i) + " says \\u00e9\\n ok");
  const std::string jsonl = jsonl_of(texts);
  write_bytes(dir / "c.jsonl", jsonl);
  // Two frames back to back (as concatenated .zst files are), crossing the 1 MiB read buffer.
  const std::size_t half = jsonl.find('\n', jsonl.size() / 2) + 1;
  write_bytes(dir / "c.jsonl.zst", zstd_compress(jsonl.substr(0, half)) + zstd_compress(jsonl.substr(half), 19));
  InputReport plain, packed;
  const auto a = read_all(dir / "c.jsonl", {}, plain);
  const auto b = read_all(dir / "c.jsonl.zst", {}, packed);
  ASSERT_EQ(a.size(), texts.size());
  EXPECT_EQ(a, b);
  EXPECT_EQ(a[7], "document 7 says \xc3\xa9\n ok");
  EXPECT_EQ(packed.problem_count(), 0) << packed.describe_problems();
  EXPECT_LT(packed.input_bytes, plain.input_bytes);
  EXPECT_EQ(packed.document_bytes, plain.document_bytes);
}

TEST(DocumentSource, BadJsonlLinesAreSkippedAndNamed) {
  TempDir dir;
  write_bytes(dir / "bad.jsonl",
              "{\"text\": \"good one\"}\n"       // 1
              "not json at all\n"                // 2
              "{\"body\": \"no text field\"}\n"  // 3
              "{\"text\": 42}\n"                 // 4
              "\n"                               // 5: blank, skipped silently
              "{\"text\": \"bad \xff byte\"}\n"  // 6
              "[1, 2]\n"                         // 7
              "{\"text\": \"\"}\n"               // 8: empty document
              "{\"text\": \"good two\"}");       // 9, no final newline
  InputReport report;
  const auto docs = read_all(dir / "bad.jsonl", {}, report);
  EXPECT_EQ(docs, (std::vector<std::string>{"good one", "good two"}));
  EXPECT_EQ(report.count(InputProblem::not_json), 1);
  EXPECT_EQ(report.count(InputProblem::missing_field), 3);
  EXPECT_EQ(report.count(InputProblem::invalid_utf8), 1);
  EXPECT_EQ(report.empty_documents, 1);
  const std::string text = report.describe_problems();
  EXPECT_NE(text.find("bad.jsonl:2: not a JSON value"), std::string::npos) << text;
  EXPECT_NE(text.find("bad.jsonl:3: no string field \"text\""), std::string::npos) << text;
  EXPECT_NE(text.find("bad.jsonl:6: byte 14 is not UTF-8"), std::string::npos) << text;
  SourceOptions body;
  body.text_field = "body";
  InputReport by_body;
  EXPECT_EQ(read_all(dir / "bad.jsonl", body, by_body), (std::vector<std::string>{"no text field"}));
}

TEST(DocumentSource, CorruptAndTruncatedCompressedFilesAreReportedWithTheByte) {
  TempDir dir;
  std::vector<std::string> texts;
  texts.reserve(20000);
  for (int i = 0; i < 20000; ++i) texts.push_back("line " + std::to_string(i * 7919 % 100003));
  const std::string packed = zstd_compress(jsonl_of(texts));
  write_bytes(dir / "truncated.jsonl.zst", packed.substr(0, packed.size() * 2 / 3));
  std::string corrupt = packed;
  for (std::size_t i = corrupt.size() / 2; i < corrupt.size() / 2 + 64; ++i) corrupt[i] = static_cast<char>(i * 37);
  write_bytes(dir / "corrupt.jsonl.zst", corrupt);
  write_bytes(dir / "empty.jsonl.zst", "");

  InputReport truncated;
  const auto partial = read_all(dir / "truncated.jsonl.zst", {}, truncated);
  EXPECT_EQ(truncated.count(InputProblem::truncated_compressed), 1) << truncated.describe_problems();
  EXPECT_GT(partial.size(), 1000u);
  EXPECT_LT(partial.size(), texts.size());
  for (std::size_t i = 0; i < partial.size(); ++i) ASSERT_EQ(partial[i], texts[i]) << i;  // a clean prefix

  InputReport bad;
  const auto before = read_all(dir / "corrupt.jsonl.zst", {}, bad);
  EXPECT_EQ(bad.count(InputProblem::corrupt_compressed) + bad.count(InputProblem::not_json) +
                bad.count(InputProblem::invalid_utf8) + bad.count(InputProblem::missing_field),
            bad.problem_count());
  EXPECT_GE(bad.count(InputProblem::corrupt_compressed), 1) << bad.describe_problems();
  EXPECT_NE(bad.describe_problems().find("corrupt.jsonl.zst: byte "), std::string::npos);
  EXPECT_LT(before.size(), texts.size());

  InputReport empty;
  EXPECT_TRUE(read_all(dir / "empty.jsonl.zst", {}, empty).empty());
  EXPECT_EQ(empty.count(InputProblem::empty_file), 1);
  InputReport missing;
  EXPECT_TRUE(read_all(dir / "absent.txt", {}, missing).empty());
  EXPECT_EQ(missing.count(InputProblem::unreadable), 1);
}

TEST(DocumentSource, DocumentsOverTheLimitAreReportedNotHeld) {
  TempDir dir;
  const std::string big(5000, 'x');
  write_bytes(dir / "big.txt", big);
  write_bytes(dir / "parts.txt", "small\n%\n" + big + "\n%\nalso small\n");
  write_bytes(dir / "lines.jsonl", "{\"text\": \"" + big + "\"}\n{\"text\": \"fits\"}\n");
  SourceOptions options;
  options.max_document_bytes = 1000;
  InputReport report;
  EXPECT_TRUE(read_all(dir / "big.txt", options, report).empty());
  options.separator = "%";
  EXPECT_EQ(read_all(dir / "parts.txt", options, report), (std::vector<std::string>{"small\n", "also small\n"}));
  EXPECT_EQ(read_all(dir / "lines.jsonl", options, report), (std::vector<std::string>{"fits"}));
  EXPECT_EQ(report.count(InputProblem::too_long), 3) << report.describe_problems();
  EXPECT_NE(report.describe_problems().find("parts.txt:3: longer than 1000 bytes"), std::string::npos)
      << report.describe_problems();
}

}  // namespace
}  // namespace myriad::data
