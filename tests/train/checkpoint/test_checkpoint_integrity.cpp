// What a checkpoint guarantees about itself at resume: it carries the tokenizer its token ids
// mean (saved beside the manifest, fingerprint in the header; a load under another tokenizer is
// refused naming both and the fix), verify() finds a flipped bit anywhere, and `--resume auto`
// passes over a damaged newest checkpoint for the newest intact one, naming it and leaving it in place.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>

#include "myriad/core/error.h"
#include "myriad/train/checkpoint/checkpoint.h"
#include "myriad/train/checkpoint/checkpoint_folder.h"
#include "myriad/train/checkpoint/checkpoint_reader.h"
#include "myriad/train/checkpoint/checkpoint_tokenizer.h"

namespace fs = std::filesystem;

namespace myriad::train {
namespace {

fs::path integrity_dir(const std::string& name) {
  fs::path dir = fs::temp_directory_path() / ("myriad_ckintegrity_" + name + "_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

const std::string kIntegrityText =
    "the cat sees the ball. a dog chases the cat. the cat likes the garden. a dog sees a quiet river.\n";

// A one-file checkpoint of `step` holding tensor "w" (and, when given, the tokenizer).
std::string save_integrity_checkpoint(const fs::path& dir, std::int64_t step, const data::BpeTokenizer* tokenizer) {
  CheckpointHeader header;
  header.step = step;
  header.config_yaml = "config";
  Tensor w = Tensor::full({64}, 0.5);
  const std::string tmp = begin_checkpoint(dir.string(), step);
  if (tokenizer != nullptr) write_checkpoint_tokenizer(tmp, *tokenizer, {}, header);
  const std::string entries = write_checkpoint_file(tmp, "rank_0.bin", {{"w", w.shape(), {{0, 64}}, w}}, {});
  return finish_checkpoint(dir.string(), tmp, header, {entries}, 10, {});
}

void flip_checkpoint_byte(const fs::path& file, std::uint64_t offset) {
  std::fstream f(file, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c = 0;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x5a));
}

TEST(CheckpointIntegrity, ACheckpointCarriesItsTokenizerAndRecordsItsFingerprint) {
  const fs::path dir = integrity_dir("tokenizer");
  const data::BpeTokenizer tok = data::BpeTokenizer::train(kIntegrityText, 280);
  const std::string path = save_integrity_checkpoint(dir, 2, &tok);
  CheckpointReader reader(path, "");
  EXPECT_EQ(reader.header().tokenizer_fingerprint, tokenizer_fingerprint(tok));
  EXPECT_EQ(reader.header().tokenizer_vocab_size, tok.vocab_size());
  ASSERT_EQ(reader.tokenizer_file(), (fs::path(path) / "tokenizer.bpe").string());
  const data::BpeTokenizer back = data::BpeTokenizer::load(reader.tokenizer_file());
  EXPECT_EQ(back.encode(kIntegrityText), tok.encode(kIntegrityText));
  EXPECT_EQ(tokenizer_fingerprint(back), tokenizer_fingerprint(tok));
  EXPECT_NO_THROW(reader.verify());
  // A checkpoint without a tokenizer (an older one) has none recorded and loads.
  const std::string old = save_integrity_checkpoint(dir, 3, nullptr);
  EXPECT_EQ(CheckpointReader(old, "").header().tokenizer_fingerprint, "");
  EXPECT_EQ(tokenizer_mismatch(old, CheckpointReader(old, "").header(), &tok, "train:280"), "");
  fs::remove_all(dir);
}

TEST(CheckpointIntegrity, ALoadUnderAnotherTokenizerIsRefusedNamingBothAndTheFix) {
  const fs::path dir = integrity_dir("mismatch");
  const data::BpeTokenizer tok = data::BpeTokenizer::train(kIntegrityText, 280);
  const data::BpeTokenizer other =
      data::BpeTokenizer::train("zebras juggle purple umbrellas quietly. zebras juggle again.\n", 280);
  ASSERT_NE(tokenizer_fingerprint(tok), tokenizer_fingerprint(other));
  const std::string path = save_integrity_checkpoint(dir, 2, &tok);
  const CheckpointHeader header = CheckpointReader(path, "").header();
  EXPECT_EQ(tokenizer_mismatch(path, header, &tok, "train:280"), "");
  const std::string why = tokenizer_mismatch(path, header, &other, "train:280");
  EXPECT_NE(why.find(tokenizer_fingerprint(tok)), std::string::npos) << why;
  EXPECT_NE(why.find(tokenizer_fingerprint(other)), std::string::npos) << why;
  EXPECT_NE(why.find(std::to_string(tok.vocab_size()) + " tokens"), std::string::npos) << why;
  EXPECT_NE(why.find("corpus changed"), std::string::npos) << why;
  EXPECT_NE(why.find("--set data.tokenizer=bpe:" + (fs::path(path) / "tokenizer.bpe").string()), std::string::npos)
      << why;
  fs::remove_all(dir);
}

TEST(CheckpointIntegrity, VerifyFindsAFlippedBitInTheDataOrTheTokenizer) {
  const fs::path dir = integrity_dir("verify");
  const data::BpeTokenizer tok = data::BpeTokenizer::train(kIntegrityText, 270);
  const std::string path = save_integrity_checkpoint(dir, 4, &tok);
  EXPECT_EQ(checkpoint_damage(path), "");
  flip_checkpoint_byte(fs::path(path) / "rank_0.bin", 100);
  std::string why = checkpoint_damage(path);
  EXPECT_NE(why.find("rank_0.bin"), std::string::npos) << why;
  EXPECT_NE(why.find("fails its checksum"), std::string::npos) << why;
  flip_checkpoint_byte(fs::path(path) / "rank_0.bin", 100);  // repaired
  EXPECT_EQ(checkpoint_damage(path), "");
  flip_checkpoint_byte(fs::path(path) / "tokenizer.bpe", 20);
  why = checkpoint_damage(path);
  EXPECT_NE(why.find("tokenizer.bpe"), std::string::npos) << why;
  fs::remove_all(dir);
}

TEST(CheckpointIntegrity, AnIntegerFieldThatIsAFloatOrOutOfRangeIsRefusedNamingIt) {
  // nlohmann's float -> integer conversion is undefined past the type's range (the manifest
  // fuzzer's find: a piece's "bytes": 4.4e89); every integer field is checked and named instead.
  const fs::path dir = integrity_dir("numbers");
  const std::string path = save_integrity_checkpoint(dir, 4, nullptr);
  std::string text;
  {
    std::ifstream in(fs::path(path) / "manifest.json");
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  ASSERT_NO_THROW(CheckpointReader(path, ""));
  const auto with = [&](const std::string& from, const std::string& to) {
    std::string edited = text;
    const std::size_t at = edited.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    if (at != std::string::npos) edited.replace(at, from.size(), to);
    std::ofstream(fs::path(path) / "manifest.json") << edited;
  };
  const auto refusal = [&] {
    try {
      CheckpointReader reader(path, "");
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("(opened)");
  };
  with("\n \"step\": 4", "\n \"step\": 4.5");  // the top-level step (data_cursor has one too)
  std::string why = refusal();
  EXPECT_NE(why.find("'step' is 4.5, not a whole number"), std::string::npos) << why;
  with("\"bytes\": 256", "\"bytes\": 4.4e89");  // the files entry: listed before the tensors
  why = refusal();
  EXPECT_NE(why.find("bytes' is 4.4e+89, not a whole number"), std::string::npos) << why;
  with("\"seed\": 0", "\"seed\": -1");  // an unsigned field
  why = refusal();
  EXPECT_NE(why.find("'rng.seed' is -1, not a whole number in [0, "), std::string::npos) << why;
  fs::remove_all(dir);
}

TEST(CheckpointIntegrity, ResumeAutoPassesOverADamagedNewestCheckpointNamingIt) {
  const fs::path dir = integrity_dir("fallback");
  const std::string older = save_integrity_checkpoint(dir, 2, nullptr);
  const std::string newest = save_integrity_checkpoint(dir, 4, nullptr);
  ResumePoint point = find_resume_point(dir.string(), [](const std::string& d) { return checkpoint_damage(d); });
  EXPECT_EQ(point.path, newest);
  EXPECT_EQ(point.note, "");
  flip_checkpoint_byte(fs::path(newest) / "rank_0.bin", 8);
  point = find_resume_point(dir.string(), [](const std::string& d) { return checkpoint_damage(d); });
  EXPECT_EQ(point.path, older);
  EXPECT_EQ(point.step, 2);
  ASSERT_EQ(point.damaged.size(), 1u);
  EXPECT_NE(point.note.find(newest), std::string::npos) << point.note;
  EXPECT_NE(point.note.find("fails its checksum"), std::string::npos) << point.note;
  EXPECT_NE(point.note.find("left in place"), std::string::npos) << point.note;
  EXPECT_TRUE(fs::exists(fs::path(newest) / "manifest.json")) << "the damaged checkpoint must stay for inspection";
  // Without verification (the cheap listing) the newest is still what `latest` names.
  EXPECT_EQ(find_resume_point(dir.string()).path, newest);
  // None intact: one error listing each with its damage.
  flip_checkpoint_byte(fs::path(older) / "rank_0.bin", 8);
  try {
    find_resume_point(dir.string(), [](const std::string& d) { return checkpoint_damage(d); });
    FAIL() << "expected an error when no checkpoint is intact";
  } catch (const Error& e) {
    const std::string why = e.message();
    EXPECT_NE(why.find("none of the 2 checkpoint(s)"), std::string::npos) << why;
    EXPECT_NE(why.find(older), std::string::npos) << why;
    EXPECT_NE(why.find(newest), std::string::npos) << why;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace myriad::train
