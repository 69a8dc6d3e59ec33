// Encrypted checkpoints (checkpoint.h "At rest"): with a key ring every file but the marker is
// encrypted and holds no 16-byte window of the weights; a box read across pieces (what resharding
// does) equals the source; verify() and the tokenizer read through the keys; without keys the
// reader names the key and the settings; a wrong key is not "damage" (resume auto would pass over
// it) but an error; a flipped ciphertext byte is damage naming the file; a data file copied from
// another checkpoint encrypted under the same key (valid on its own) is refused: the manifest
// binds each file by its id; encrypted pieces carry no CRC-32 (the tags authenticate them), and a
// clear piece without one is refused.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "../../support/reference.h"
#include "myriad/core/error.h"
#include "myriad/train/checkpoint/checkpoint.h"
#include "myriad/train/checkpoint/checkpoint_reader.h"
#include "myriad/train/checkpoint/checkpoint_tokenizer.h"

namespace fs = std::filesystem;

namespace myriad::train {
namespace {

data::KeyRing key_ring(const std::string& id, std::uint64_t seed) {
  data::KeyRing ring;
  ring.add(id, testing::random_bytes(32, seed), true);
  return ring;
}

std::string file_bytes(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(EncryptedCheckpoint, HoldsNoWeightInClearAndReadsAnyBoxWithTheKey) {
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const fs::path dir = fs::temp_directory_path() / ("myriad_enc_ckpt_" + std::to_string(seed));
  fs::remove_all(dir);
  const data::AtRest at_rest(key_ring("train-1", seed));
  // 64 x 6000 f32 (1.5 MiB: several encryption chunks), written as two row pieces.
  const Tensor w = testing::random_tensor({64, 6000}, seed, 1);
  std::vector<CheckpointPiece> pieces = {{"w", w.shape(), {{0, 40}, {0, 6000}}, w.slice(0, 0, 40)},
                                         {"w", w.shape(), {{40, 64}, {0, 6000}}, w.slice(0, 40, 64)}};
  CheckpointHeader header;
  header.step = 3;
  header.config_yaml = "config";
  const data::BpeTokenizer tokenizer =
      data::BpeTokenizer::train("the cat sees the ball. a dog chases the cat. the cat sleeps.\n", 270);
  const std::string tmp = begin_checkpoint(dir.string(), header.step);
  write_checkpoint_tokenizer(tmp, tokenizer, at_rest, header);
  const std::string entries = write_checkpoint_file(tmp, "rank_0.bin", pieces, at_rest);
  const std::string path = finish_checkpoint(dir.string(), tmp, header, {entries}, 2, at_rest);

  const std::string weights(static_cast<const char*>(w.raw_data()), w.nbytes());
  for (const auto& entry : fs::directory_iterator(path)) {
    if (entry.path().filename() == kCheckpointMarker) continue;
    const std::string stored = file_bytes(entry.path());
    EXPECT_TRUE(data::is_encrypted_file(entry.path().string())) << entry.path();
    for (std::size_t at = 0; at + 16 <= weights.size(); at += 4096 + 12)
      ASSERT_EQ(stored.find(weights.substr(at, 16)), std::string::npos) << entry.path() << " holds weights at " << at;
  }

  CheckpointReader reader(path, "", at_rest);
  reader.verify();
  EXPECT_EQ(reader.header().step, 3);
  EXPECT_EQ(tokenizer_fingerprint(data::BpeTokenizer::load(reader.tokenizer_file(), at_rest)),
            tokenizer_fingerprint(tokenizer));
  const std::vector<nn::IndexRange> box = {{17, 58}, {123, 5001}};  // across both pieces
  Tensor part = Tensor::zeros({41, 4878});
  reader.read("w", w.shape(), box, part);
  const Tensor expected = w.slice(0, 17, 58).slice(1, 123, 5001).contiguous();
  ASSERT_EQ(0, std::memcmp(part.raw_data(), expected.raw_data(), part.nbytes()));
  EXPECT_EQ(checkpoint_damage(path, at_rest), "");
  // Its pieces carry no CRC-32 (the tags authenticate them; no pass over the data computes one).
  const nlohmann::json manifest = nlohmann::json::parse(at_rest.read_all((fs::path(path) / "manifest.json").string()));
  for (const nlohmann::json& piece : manifest.at("tensors").at("w").at("pieces")) EXPECT_FALSE(piece.contains("crc32"));

  // No key: the reader names the key and the settings; a wrong key throws instead of being damage.
  try {
    CheckpointReader without(path, "");
    ADD_FAILURE() << "read an encrypted checkpoint without its key";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("key 'train-1'"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("security.key_file"), std::string::npos) << e.message();
  }
  const data::AtRest wrong(key_ring("train-1", seed + 1));
  EXPECT_THROW(checkpoint_damage(path, wrong), Error);

  // Another checkpoint's data file, of the same size and under the same key, cannot stand in.
  const fs::path data_file = fs::path(path) / "rank_0.bin";
  const fs::path other_dir = dir / "other";
  CheckpointHeader without_tokenizer = header;
  without_tokenizer.tokenizer_fingerprint.clear();
  const std::string other = save_checkpoint(other_dir.string(), without_tokenizer, pieces, 2, at_rest);
  fs::rename(data_file, dir / "kept.bin");
  fs::copy_file(fs::path(other) / "rank_0.bin", data_file);
  const std::string swapped = checkpoint_damage(path, at_rest);
  EXPECT_NE(swapped.find("is not the file"), std::string::npos) << swapped;
  fs::remove(data_file);
  fs::rename(dir / "kept.bin", data_file);
  EXPECT_EQ(checkpoint_damage(path, at_rest), "");

  // A flipped byte of the data file's ciphertext is damage, naming the file.
  {
    std::fstream f(data_file, std::ios::in | std::ios::out | std::ios::binary);
    const std::streamoff at = 8 + 160 + (1 << 20) + 16 + 5;  // inside the second chunk
    char c = 0;
    f.seekg(at);
    f.get(c);
    f.seekp(at);
    f.put(static_cast<char>(c ^ 0x5a));
  }
  const std::string damage = checkpoint_damage(path, at_rest);
  EXPECT_NE(damage.find(data_file.string()), std::string::npos) << damage;
  fs::remove_all(dir);
}

// A clear file's pieces keep their CRC-32; a clear piece without one is refused by name (only a
// file the manifest binds as encrypted may go without).
TEST(EncryptedCheckpoint, AClearPieceWithoutItsChecksumIsRefused) {
  const std::uint64_t seed = testing::fresh_seed();
  const fs::path dir = fs::temp_directory_path() / ("myriad_clear_crc_" + std::to_string(seed));
  fs::remove_all(dir);
  const Tensor w = testing::random_tensor({8, 100}, seed, 1);
  CheckpointHeader header;
  header.step = 1;
  header.config_yaml = "config";
  const std::string path = save_checkpoint(dir.string(), header, {{"w", w.shape(), {{0, 8}, {0, 100}}, w}}, 2, {});
  const fs::path manifest_path = fs::path(path) / "manifest.json";
  nlohmann::json manifest = nlohmann::json::parse(file_bytes(manifest_path));
  ASSERT_TRUE(manifest.at("tensors").at("w").at("pieces").at(0).contains("crc32"));
  manifest["tensors"]["w"]["pieces"][0].erase("crc32");
  std::ofstream(manifest_path) << manifest.dump();
  try {
    CheckpointReader reader(path, "");
    ADD_FAILURE() << "read a clear piece without its checksum";
  } catch (const Error& e) {
    EXPECT_NE(e.message().find("records no crc32"), std::string::npos) << e.message();
    EXPECT_NE(e.message().find("'w'"), std::string::npos) << e.message();
  }
  fs::remove_all(dir);
}

TEST(EncryptedCheckpoint, ReadsAcrossMoreFilesThanItKeepsOpen) {
  // Six ranks' files (the reader keeps four open): reads that go back and forth reopen them.
  const std::uint64_t seed = testing::fresh_seed();
  MYRIAD_SEED_TRACE(seed);
  const fs::path dir = fs::temp_directory_path() / ("myriad_enc_files_" + std::to_string(seed));
  fs::remove_all(dir);
  const data::AtRest at_rest(key_ring("k", seed));
  const Tensor w = testing::random_tensor({60, 700}, seed, 2);
  CheckpointHeader header;
  header.step = 1;
  header.config_yaml = "config";
  const std::string tmp = begin_checkpoint(dir.string(), header.step);
  std::vector<std::string> entries;
  for (int rank = 0; rank < 6; ++rank) {
    const std::int64_t first = rank * 10;
    entries.push_back(write_checkpoint_file(
        tmp, "rank_" + std::to_string(rank) + ".bin",
        {{"w", w.shape(), {{first, first + 10}, {0, 700}}, w.slice(0, first, first + 10)}}, at_rest));
  }
  const std::string path = finish_checkpoint(dir.string(), tmp, header, entries, 1, at_rest);
  CheckpointReader reader(path, "", at_rest);
  for (const std::int64_t row : {55, 3, 47, 12, 38, 21, 59, 0}) {  // rows of every file, out of order
    Tensor part = Tensor::zeros({1, 700});
    reader.read("w", w.shape(), {{row, row + 1}, {0, 700}}, part);
    ASSERT_EQ(0, std::memcmp(part.raw_data(), w.slice(0, row, row + 1).contiguous().raw_data(), part.nbytes()))
        << "row " << row;
  }
  Tensor whole = Tensor::zeros({60, 700});
  reader.read_whole("w", whole);
  EXPECT_EQ(0, std::memcmp(whole.raw_data(), w.contiguous().raw_data(), whole.nbytes()));
  fs::remove_all(dir);
}

}  // namespace
}  // namespace myriad::train
