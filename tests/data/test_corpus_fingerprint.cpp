// Corpus fingerprint: equal for unchanged files; a changed size, content (same size and time),
// a new or a removed file each give a different fingerprint and a difference naming the file.
#include "myriad/data/corpus_fingerprint.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "myriad/core/error.h"

namespace myriad::data {
namespace {

namespace fs = std::filesystem;

TEST(CorpusFingerprint, NoticesEveryKindOfChangeAndNamesTheFile) {
  const fs::path dir = fs::temp_directory_path() / ("myriad_fingerprint_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  const std::string a = (dir / "a.txt").string(), b = (dir / "b.txt").string();
  std::ofstream(a) << "first corpus file\n";
  std::ofstream(b) << "second\n";
  const std::string original = corpus_fingerprint({a, b});
  EXPECT_EQ(corpus_fingerprint({a, b}), original);
  EXPECT_EQ(first_difference(original, original), "");
  EXPECT_NE(original.find("file " + a + " size 18 "), std::string::npos) << original;

  // Same size, same modification time, other bytes: the content hash notices.
  const auto time = fs::last_write_time(a);
  std::ofstream(a) << "FIRST corpus file\n";
  fs::last_write_time(a, time);
  const std::string rewritten = corpus_fingerprint({a, b});
  EXPECT_NE(rewritten, original);
  EXPECT_NE(first_difference(original, rewritten).find(a + " changed"), std::string::npos);

  std::ofstream(b, std::ios::app) << "more\n";
  EXPECT_NE(first_difference(rewritten, corpus_fingerprint({a, b})).find(b + " changed (size 7"), std::string::npos);

  const std::string c = (dir / "c.txt").string();
  std::ofstream(c) << "new\n";
  EXPECT_EQ(first_difference(corpus_fingerprint({a, b}), corpus_fingerprint({a, b, c})), c + " is new");
  EXPECT_EQ(first_difference(corpus_fingerprint({a, b, c}), corpus_fingerprint({a, b})), c + " is gone");
  EXPECT_EQ(first_difference(corpus_fingerprint({a, b}), corpus_fingerprint({b, a})), "the order of the files changed");
  EXPECT_THROW(corpus_fingerprint({(dir / "missing.txt").string()}), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace myriad::data
