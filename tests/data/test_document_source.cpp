// Document sources: text, JSONL and zstd-compressed JSONL give the documents written into them,
// in order; every kind of bad input is skipped and counted with the file and line (or compressed
// byte) named; a document larger than the limit is reported, not held; UTF-8 validation against
// hand-made cases (overlong forms, surrogates, code points past U+10FFFF, truncated sequences).
#include <gtest/gtest.h>
#include <zstd.h>

#include <map>
#include <memory>
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

// Frames of `texts` split in `frames` parts, each compressed as its own zstd frame (concatenated),
// with or without the content checksum (the zstd command writes one by default).
std::string zstd_frames(const std::vector<std::string>& texts, int frames, bool checksum,
                        std::vector<std::size_t>* frame_ends = nullptr) {
  std::unique_ptr<ZSTD_CCtx, decltype(&ZSTD_freeCCtx)> context(ZSTD_createCCtx(), &ZSTD_freeCCtx);
  EXPECT_FALSE(ZSTD_isError(ZSTD_CCtx_setParameter(context.get(), ZSTD_c_checksumFlag, checksum ? 1 : 0)));
  std::string out;
  const std::size_t per = (texts.size() + frames - 1) / frames;
  for (std::size_t first = 0; first < texts.size(); first += per) {
    const std::vector<std::string> part(texts.begin() + first, texts.begin() + std::min(texts.size(), first + per));
    const std::string plain = jsonl_of(part);
    std::string packed(ZSTD_compressBound(plain.size()), '\0');
    const std::size_t size = ZSTD_compress2(context.get(), packed.data(), packed.size(), plain.data(), plain.size());
    EXPECT_FALSE(ZSTD_isError(size));
    out.append(packed.data(), size);
    if (frame_ends != nullptr) frame_ends->push_back(std::min(texts.size(), first + per));
  }
  return out;
}

TEST(DocumentSource, CorruptAndTruncatedCompressedFilesAreReportedWithTheByte) {
  TempDir dir;
  std::vector<std::string> texts;
  texts.reserve(20000);
  for (int i = 0; i < 20000; ++i) texts.push_back("line " + std::to_string(i * 7919 % 100003));
  std::vector<std::size_t> ends;
  const std::string packed = zstd_frames(texts, 4, true, &ends);
  // Cut inside the third frame: the first two frames' documents, exactly, and nothing of the third.
  write_bytes(dir / "truncated.jsonl.zst", packed.substr(0, packed.size() * 5 / 8));
  std::string corrupt = packed;
  for (std::size_t i = corrupt.size() / 2; i < corrupt.size() / 2 + 64; ++i) corrupt[i] = static_cast<char>(i * 37);
  write_bytes(dir / "corrupt.jsonl.zst", corrupt);
  write_bytes(dir / "empty.jsonl.zst", "");

  InputReport truncated;
  const auto partial = read_all(dir / "truncated.jsonl.zst", {}, truncated);
  EXPECT_EQ(truncated.count(InputProblem::truncated_compressed), 1) << truncated.describe_problems();
  EXPECT_NE(truncated.describe_problems().find("decompressed bytes dropped"), std::string::npos);
  ASSERT_EQ(partial.size(), ends[1]);  // whole frames only
  for (std::size_t i = 0; i < partial.size(); ++i) ASSERT_EQ(partial[i], texts[i]) << i;
  EXPECT_EQ(truncated.unchecked_frames, 0);

  InputReport bad;
  const auto before = read_all(dir / "corrupt.jsonl.zst", {}, bad);
  EXPECT_EQ(bad.count(InputProblem::corrupt_compressed), bad.problem_count()) << bad.describe_problems();
  EXPECT_EQ(bad.count(InputProblem::corrupt_compressed), 1) << bad.describe_problems();
  EXPECT_NE(bad.describe_problems().find("corrupt.jsonl.zst: byte "), std::string::npos);
  ASSERT_LT(before.size(), texts.size());
  for (std::size_t i = 0; i < before.size(); ++i) ASSERT_EQ(before[i], texts[i]) << i;  // whole frames before it

  InputReport empty;
  EXPECT_TRUE(read_all(dir / "empty.jsonl.zst", {}, empty).empty());
  EXPECT_EQ(empty.count(InputProblem::empty_file), 1);
  InputReport missing;
  EXPECT_TRUE(read_all(dir / "absent.txt", {}, missing).empty());
  EXPECT_EQ(missing.count(InputProblem::unreadable), 1);
}

// Issue 46 item 4: a single bit flipped anywhere in a checksummed multi-frame .jsonl.zst never
// yields a garbled document, and a frame's documents are kept all or none.
TEST(DocumentSource, ABitFlipInAChecksummedFrameDropsTheWholeFrameNeverPartOfIt) {
  TempDir dir;
  std::vector<std::string> texts;
  for (int i = 0; i < 3000; ++i)
    texts.push_back("doc " + std::to_string(i) + " of some words " + std::to_string(i * 31));
  std::vector<std::size_t> ends;
  const std::string packed = zstd_frames(texts, 3, true, &ends);
  std::map<std::string, std::size_t> frame_of;
  for (std::size_t i = 0, frame = 0; i < texts.size(); ++i) {
    while (i >= ends[frame]) ++frame;
    frame_of[texts[i]] = frame;
  }
  int dropped_some = 0;
  for (int k = 1; k <= 24; ++k) {
    std::string flipped = packed;
    const std::size_t at = packed.size() * static_cast<std::size_t>(k) / 25;
    flipped[at] = static_cast<char>(flipped[at] ^ (1 << (k % 8)));
    write_bytes(dir / "flipped.jsonl.zst", flipped);
    InputReport report;
    const auto documents = read_all(dir / "flipped.jsonl.zst", {}, report);
    std::map<std::size_t, std::size_t> kept_per_frame;
    for (const std::string& d : documents) {
      const auto found = frame_of.find(d);
      ASSERT_NE(found, frame_of.end()) << "a garbled document kept (flip at byte " << at << "): " << d;
      ++kept_per_frame[found->second];
    }
    for (const auto& [frame, kept] : kept_per_frame) {
      const std::size_t size = ends[frame] - (frame == 0 ? 0 : ends[frame - 1]);
      EXPECT_EQ(kept, size) << "frame " << frame << " kept in part (flip at byte " << at << ")";
    }
    if (documents.size() < texts.size()) {
      ++dropped_some;
      EXPECT_GE(report.count(InputProblem::corrupt_compressed) + report.count(InputProblem::truncated_compressed), 1)
          << "documents vanished without a report (flip at byte " << at << ")";
    }
  }
  EXPECT_GT(dropped_some, 12);  // most flips hit data the checksum or the decoder catches
}

TEST(DocumentSource, ALineCutByACorruptNextFrameIsNotKeptAsADocument) {
  // Two frames that split the text in the middle of a line; the second frame corrupt: the first
  // frame's whole lines are kept, its unfinished last line is not (it is a prefix, not a document).
  TempDir dir;
  const std::string text = jsonl_of({"first", "second", "third"});
  const std::size_t cut = text.find("second") + 3;
  std::string packed = zstd_compress(text.substr(0, cut));
  std::string tail = zstd_compress(text.substr(cut));
  for (std::size_t i = 6; i < tail.size(); ++i) tail[i] = static_cast<char>(tail[i] ^ 0x5A);
  write_bytes(dir / "cut.jsonl.zst", packed + tail);
  InputReport report;
  EXPECT_EQ(read_all(dir / "cut.jsonl.zst", {}, report), std::vector<std::string>({"first"}));
  EXPECT_EQ(report.count(InputProblem::corrupt_compressed), 1) << report.describe_problems();
  EXPECT_EQ(report.count(InputProblem::not_json), 0) << report.describe_problems();
}

TEST(DocumentSource, FramesWithoutAChecksumAreKeptAndCounted) {
  TempDir dir;
  const std::vector<std::string> texts = {"alpha", "beta", "gamma", "delta"};
  write_bytes(dir / "plain.jsonl.zst", zstd_frames(texts, 2, false));
  InputReport report;
  EXPECT_EQ(read_all(dir / "plain.jsonl.zst", {}, report), texts);
  EXPECT_EQ(report.unchecked_frames, 2);
  EXPECT_NE(report.describe_problems().find("unchecked_frames: 2"), std::string::npos);
  write_bytes(dir / "checked.jsonl.zst", zstd_frames(texts, 2, true));
  InputReport checked;
  EXPECT_EQ(read_all(dir / "checked.jsonl.zst", {}, checked), texts);
  EXPECT_EQ(checked.unchecked_frames, 0);
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
